//! The page frame and the pieces every page uses: the layout with its
//! navigation and logout form, UTC timestamps with relative times, and a
//! renderer that turns a ctl report's JSON (the same document `--json`
//! prints) into tables and lists. maud escapes every value.

use actix_web::HttpResponse;
use actix_web::http::{StatusCode, header};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

use crate::auth::Who;

/// A page under construction.
pub struct Page<'a> {
    title: String,
    who: Option<&'a Who>,
    body: Markup,
    /// Seconds after which the page's script fetches it again and swaps
    /// the content in (no full reload); `None`: the page stays as served.
    live: Option<u32>,
}

impl<'a> Page<'a> {
    pub fn new(title: &str, who: Option<&'a Who>) -> Page<'a> {
        Page {
            title: title.to_owned(),
            who,
            body: html! {},
            live: None,
        }
    }

    /// Refreshes the content every `secs` seconds while the page is open.
    pub fn live(mut self, secs: u32) -> Page<'a> {
        self.live = Some(secs);
        self
    }

    pub fn body(mut self, body: Markup) -> Page<'a> {
        self.body = body;
        self
    }

    fn render(self) -> Markup {
        const NAV: [(&str, &str); 7] = [
            ("/", "Overview"),
            ("/letters", "Dead letters"),
            ("/events", "Events"),
            ("/notifications", "Notifications"),
            ("/refunds", "Refunds"),
            ("/trace", "Trace"),
            ("/audit", "Audit"),
        ];
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (self.title) " · oncehook console" }
                    link rel="stylesheet" href="/static/console.css";
                    script src="/static/console.js" defer {}
                }
                body {
                    @if let Some(who) = self.who {
                        header {
                            nav {
                                strong { "oncehook" }
                                @for (href, label) in NAV { a href=(href) { (label) } }
                            }
                            form.logout method="post" action="/logout" {
                                span.user { (who.session.user) " (" (who.role.as_str()) ")" }
                                input type="hidden" name="csrf" value=(who.csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                    main data-refresh=[self.live] { (self.body) }
                }
            }
        }
    }
}

/// An HTML answer; pages are never cached.
pub fn respond(status: StatusCode, page: Page<'_>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(page.render().into_string())
}

pub fn ok(page: Page<'_>) -> HttpResponse {
    respond(StatusCode::OK, page)
}

/// A page saying, in short, what did not answer. The whole error goes to
/// the log at ERROR with the page and the user. The page shows no driver's
/// text: a database failure (its message may quote the statement or the
/// bytes it was sent) is one generic sentence, a broker or I/O error
/// another; otherwise only the error's own first line, which is ours (such
/// as "queue P.dead does not exist: is ONCEHOOK_AMQP_PREFIX right…").
pub fn failure(who: &Who, title: &str, err: &anyhow::Error) -> HttpResponse {
    tracing::error!(
        page = title,
        user = %who.session.user,
        error = %format!("{err:#}"),
        "a console page could not be served"
    );
    let what = if err.chain().any(|c| c.is::<sqlx::Error>()) {
        "The database did not answer this page's query.".to_owned()
    } else if err.is::<lapin::Error>() || err.is::<std::io::Error>() {
        "The broker did not answer.".to_owned()
    } else {
        let first = err.to_string();
        if first.ends_with(['.', '?', '!']) {
            first
        } else {
            format!("{first}.")
        }
    };
    respond(
        StatusCode::BAD_GATEWAY,
        Page::new(title, Some(who)).body(html! {
            h1 { (title) }
            p.error role="alert" { (what) " The details are in the console's log; reload to try again." }
        }),
    )
}

/// A UTC timestamp with how long ago it was.
pub fn when(t: OffsetDateTime) -> Markup {
    let utc = t.to_offset(time::UtcOffset::UTC);
    let text = utc
        .format(format_description!(
            "[year]-[month]-[day] [hour]:[minute]:[second]"
        ))
        .unwrap_or_default();
    let iso = utc.format(&Rfc3339).unwrap_or_default();
    html! {
        time datetime=(iso) title=(iso) { (text) " UTC" }
        " " span.ago { "(" (relative(utc, OffsetDateTime::now_utc())) ")" }
    }
}

/// "3 min ago", "in 2 h".
pub fn relative(t: OffsetDateTime, now: OffsetDateTime) -> String {
    let secs = (now - t).whole_seconds();
    let (n, future) = (secs.unsigned_abs(), secs < 0);
    let amount = match n {
        0..=4 => return "just now".into(),
        5..=59 => format!("{n} s"),
        60..=3_599 => format!("{} min", n / 60),
        3_600..=86_399 => format!("{} h", n / 3_600),
        _ => format!("{} d", n / 86_400),
    };
    if future {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// A JSON value as HTML: timestamps with relative times, arrays of objects
/// as tables, objects as two-column tables.
pub fn value(v: &Value) -> Markup {
    match v {
        Value::Null => html! { span.none { "-" } },
        Value::Bool(b) => html! { (if *b { "yes" } else { "no" }) },
        Value::Number(n) => html! { (n.to_string()) },
        Value::String(s) => match OffsetDateTime::parse(s, &Rfc3339) {
            Ok(t) => when(t),
            Err(_) => html! { (s) },
        },
        Value::Array(items) if items.is_empty() => html! { span.none { "none" } },
        Value::Array(items) if items.iter().all(Value::is_object) => rows(items),
        Value::Array(items) => html! { ul { @for i in items { li { (value(i)) } } } },
        Value::Object(map) if map.is_empty() => html! { span.none { "none" } },
        Value::Object(map) => html! {
            table.facts { tbody { @for (k, v) in map { tr { th scope="row" { (label(k)) } td { (value(v)) } } } } }
        },
    }
}

/// Objects as rows of one table, columns in first-seen order.
pub fn rows(items: &[Value]) -> Markup {
    let mut columns: Vec<&str> = Vec::new();
    for item in items {
        if let Value::Object(map) = item {
            for k in map.keys() {
                if !columns.contains(&k.as_str()) {
                    columns.push(k);
                }
            }
        }
    }
    html! {
        table {
            thead { tr { @for c in &columns { th scope="col" { (label(c)) } } } }
            tbody { @for item in items { tr { @for c in &columns { td { (value(item.get(*c).unwrap_or(&Value::Null))) } } } } }
        }
    }
}

/// A key as shown: verbatim, since a key may be data (a gateway, an error
/// kind) and field names are the `--json` words.
pub fn label(key: &str) -> &str {
    key
}

/// Labelled values in the given order, as a two-column table.
pub fn fields(rows: &[(&str, Value)]) -> Markup {
    html! {
        table.facts { tbody { @for (k, v) in rows { tr { th scope="row" { (k) } td { (value(v)) } } } } }
    }
}

/// A JSON document pretty-printed in a `<pre>`.
pub fn pretty(v: &Value) -> Markup {
    html! { pre.payload { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_like_the_runbook() {
        let now = OffsetDateTime::now_utc();
        assert_eq!(relative(now, now), "just now");
        assert_eq!(relative(now - time::Duration::minutes(3), now), "3 min ago");
        assert_eq!(relative(now + time::Duration::hours(2), now), "in 2 h");
        assert_eq!(relative(now - time::Duration::days(9), now), "9 d ago");
    }

    #[test]
    fn values_are_escaped() {
        let out = value(&Value::String("<script>x</script>".into())).into_string();
        assert!(!out.contains("<script>"), "{out}");
    }
}
