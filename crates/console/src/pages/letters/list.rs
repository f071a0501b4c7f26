//! `GET /letters`: the dead letters a filter matches (the oldest
//! [`LIST_LIMIT`]), the counts by gateway, kind and source behind the
//! filter's choices, and for an operator the bulk replay and purge buttons.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_ops::dlq::Filter;
use oncehook_ops::dlq::letter::Letter;
use time::OffsetDateTime;

use super::{Filtered, WINDOWS, freshness, letter_table, sees};
use crate::auth::{self, Who};
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::pages::events::{enc, select};
use crate::state::State;

/// Rows the list shows at most.
const LIST_LIMIT: usize = 500;

/// `GET /letters`
pub async fn list(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let q = Pairs::parse(req.query_string().as_bytes());
    let Filtered {
        filter,
        within,
        view,
    } = match Filtered::read(&who, &state, &q).await {
        Ok(f) => f,
        Err(page) => return page,
    };
    // What the account sees: every letter, or its tenants' only.
    let letters: Vec<&Letter> = view
        .snapshot
        .letters
        .iter()
        .filter(|l| sees(&who, l))
        .collect();
    let truncated = view.snapshot.truncated;
    let now = OffsetDateTime::now_utc();
    let matching: Vec<&Letter> = letters
        .iter()
        .copied()
        .filter(|l| filter.matches(l, now))
        .collect();
    let counts = Counts::of(&letters);
    let mut page = Page::new("Dead letters", Some(&who));
    if view.stale {
        page = page.live(3);
    }
    html::ok(page.body(html! {
        h1 { "Dead letters" }
        p.summary {
            @if truncated { "at least " }
            (letters.len()) " dead letter(s) in " code { (state.topology.dead()) }
            @if !filter.is_empty() { "; " (matching.len()) " match the filter" }
        }
        (freshness(&view))
        (counts.sections())
        (filter_form(&counts, &filter, within))
        @if who.may_act() && !matching.is_empty() {
            div.bulk {
                (bulk_form(&who, "replay", &filter, within, &format!("Replay the {} matching…", matching.len())))
                (bulk_form(&who, "purge", &filter, within, &format!("Purge the {} matching…", matching.len())))
            }
        }
        @if matching.is_empty() { p.none { "No dead letters" @if !filter.is_empty() { " match the filter" } "." } } @else {
            (letter_table(&matching[..matching.len().min(LIST_LIMIT)]))
            @if matching.len() > LIST_LIMIT { p { "Showing the oldest " (LIST_LIMIT) "; narrow the filter to see the rest." } }
        }
    }))
}

/// How many letters the snapshot holds by gateway, kind and source.
struct Counts {
    by_gateway: BTreeMap<String, usize>,
    by_kind: BTreeMap<String, usize>,
    by_source: BTreeMap<String, usize>,
}

impl Counts {
    fn of(letters: &[&Letter]) -> Counts {
        let count = |key: fn(&Letter) -> String| {
            let mut m: BTreeMap<String, usize> = BTreeMap::new();
            for l in letters {
                *m.entry(key(l)).or_default() += 1;
            }
            m
        };
        Counts {
            by_gateway: count(|l| l.facts.gateway.clone()),
            by_kind: count(|l| l.facts.kind.to_string()),
            by_source: count(|l| l.facts.source.clone().unwrap_or_else(|| "-".into())),
        }
    }

    fn sections(&self) -> Markup {
        html! {
            div.counts {
                (counts("By gateway", "gateway", &self.by_gateway))
                (counts("By kind", "kind", &self.by_kind))
                (counts("By source", "source", &self.by_source))
            }
        }
    }
}

/// The filter's choices: the gateways and sources the queue holds, every
/// kind, the windows.
fn filter_form(counts: &Counts, filter: &Filter, within: Option<&str>) -> Markup {
    let names = |m: &BTreeMap<String, usize>| m.keys().cloned().collect::<Vec<_>>();
    let (gateways, kinds, sources) = (
        names(&counts.by_gateway),
        kind_options(&counts.by_kind),
        names(&counts.by_source),
    );
    html! {
        form.filters method="get" action="/letters" {
            (select("gateway", "any gateway", &refs(&gateways), filter.gateway.as_deref()))
            (select("kind", "any kind", &refs(&kinds), filter.error_kind.as_deref()))
            (select("source", "any source", &refs(&sources), filter.source.as_deref()))
            (select("within", "failed any time", &WINDOWS, within))
            button type="submit" { "Filter" }
            @if !filter.is_empty() { a href="/letters" { "clear" } }
        }
    }
}

/// The kinds the filter offers: every kind this version knows, then any
/// other the queue holds (written by another version).
fn kind_options(by_kind: &BTreeMap<String, usize>) -> Vec<String> {
    let known = DeadLetterKind::KNOWN.iter().map(|k| k.as_str().to_owned());
    let others = by_kind
        .keys()
        .filter(|k| DeadLetterKind::from_known(k).is_none())
        .cloned();
    known.chain(others).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn counts(title: &str, param: &str, m: &BTreeMap<String, usize>) -> Markup {
    html! {
        section.count {
            h2 { (title) }
            @if m.is_empty() { p.none { "none" } }
            ul { @for (k, n) in m { li { a href=(format!("/letters?{param}={}", enc(k))) { (k) } " " span.n { (n) } } } }
        }
    }
}

fn bulk_form(who: &Who, action: &str, f: &Filter, within: Option<&str>, label: &str) -> Markup {
    html! {
        form method="post" action="/letters/preview" {
            input type="hidden" name="csrf" value=(who.csrf);
            input type="hidden" name="action" value=(action);
            @if let Some(v) = &f.gateway { input type="hidden" name="gateway" value=(v); }
            @if let Some(v) = &f.error_kind { input type="hidden" name="kind" value=(v); }
            @if let Some(v) = &f.source { input type="hidden" name="source" value=(v); }
            @if let Some(v) = within { input type="hidden" name="within" value=(v); }
            button type="submit" class=(action) { (label) }
        }
    }
}
