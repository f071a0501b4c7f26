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

// Pages whose <main> carries data-refresh="N" (the overview; a dead-letter
// list that is being read again) fetch themselves every N seconds and swap
// the new content in, without a full reload. It stops when the new page no
// longer asks for it, and skips a round while a form field has the focus.
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  if (!main || !window.fetch || !window.DOMParser) return;
  function schedule(el) {
    var secs = parseInt(el.getAttribute("data-refresh"), 10);
    if (secs > 0) setTimeout(tick, secs * 1000);
  }
  function tick() {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {
      schedule(main);
      return;
    }
    fetch(location.href, { credentials: "same-origin", redirect: "manual" })
      .then(function (resp) {
        if (resp.status !== 200) return null;
        return resp.text();
      })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        if (!fresh) return;
        main.innerHTML = fresh.innerHTML;
        if (fresh.hasAttribute("data-refresh")) {
          main.setAttribute("data-refresh", fresh.getAttribute("data-refresh"));
          schedule(main);
        } else {
          main.removeAttribute("data-refresh");
        }
      })
      .catch(function () { schedule(main); });
  }
  schedule(main);
})();
