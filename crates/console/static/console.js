// oncehook console: progressive enhancement only — every page works without it.
// Keeps the "(3 min ago)" next to each UTC timestamp current while a page stays open.
(function () {
  "use strict";
  function relative(then) {
    var secs = Math.round((Date.now() - then) / 1000);
    var future = secs < 0, n = Math.abs(secs), text;
    if (n < 5) return "just now";
    if (n < 60) text = n + " s";
    else if (n < 3600) text = Math.floor(n / 60) + " min";
    else if (n < 86400) text = Math.floor(n / 3600) + " h";
    else text = Math.floor(n / 86400) + " d";
    return future ? "in " + text : text + " ago";
  }
  function refresh() {
    var times = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var ago = times[i].nextElementSibling;
      var then = Date.parse(times[i].getAttribute("datetime"));
      if (ago && ago.className === "ago" && !isNaN(then)) ago.textContent = "(" + relative(then) + ")";
    }
  }
  setInterval(refresh, 30000);
})();
