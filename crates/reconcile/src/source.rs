//! Asking one source in a pass (docs/reconciliation.md, "When a source
//! fails mid-pass"): its calls in order, each answer's follow-ups, and
//! when to give the source up; `run` settles each call as it is handed
//! over.

use std::collections::VecDeque;

use oncehook_gateways::reconcile::Ask;

use crate::ask;
use crate::limits::{self, Budget, Pace};
use crate::report::{CallReport, SourceReport};
use oncehook_gateway_api::{ApiSource, CallError, Client};

/// Asks one source everything on its list, following up answers, and
/// hands each call over to be settled (`answered`) as soon as it is made,
/// until the list is done or the source is given up: the budget spent,
/// the credentials refused, or a call still failing after its retries (the
/// source's trouble is not the order's: nothing more is asked of it in
/// this pass). The orders it did not get to, or did not get every answer
/// about, are in `not_asked`.
pub(crate) async fn ask_source(
    client: &Client,
    source: &ApiSource,
    work: Vec<(Option<String>, Vec<Ask>)>,
    budget: &Budget,
    per_second: u32,
    mut answered: impl FnMut(CallReport),
) -> SourceReport {
    let mut report = SourceReport::new(source);
    let mut pace = Pace::new(per_second);
    let mut work = work.into_iter();
    while let Some((order_ref, asks)) = work.next() {
        let mut queue: VecDeque<Ask> = asks.into();
        let mut asked: Vec<Ask> = Vec::new();
        let mut all_answered = true;
        while let Some(ask) = queue.pop_front() {
            let result = limits::call(client, source, &ask, budget, &mut pace).await;
            let mut call = CallReport::new(order_ref.clone(), source.api.describe(&ask));
            let err = match result {
                Ok(answer) => {
                    call.status = Some(answer.status);
                    let more = answer.follow_ups;
                    asked.push(ask);
                    let planned: Vec<Ask> = asked.iter().chain(queue.iter()).cloned().collect();
                    queue.extend(ask::not_yet_asked(more, &planned));
                    call.events = answer.facts;
                    call.refs = answer.refs;
                    answered(call);
                    continue;
                }
                Err(err) => err,
            };
            if !matches!(err, CallError::Budget) {
                report.ok = false;
                call.error = Some(err.to_string());
                answered(call);
            }
            let why = match &err {
                CallError::Budget => err.to_string(),
                CallError::Credentials { status } => {
                    tracing::error!(
                        source = %source.name,
                        status,
                        "the gateway refused the reconciler's credentials: check [source.api] of source {}",
                        source.name
                    );
                    err.to_string()
                }
                CallError::Server { .. }
                | CallError::Timeout(_)
                | CallError::Connect(_)
                | CallError::RateLimited { .. } => {
                    tracing::warn!(source = %source.name, order_ref = ?order_ref, call = %source.api.describe(&ask), error = %err, "gateway API call failed after its retries: source given up for this run (its orders are asked first next run)");
                    format!("given up for this run after its retries: {err}")
                }
                CallError::Refused { .. } | CallError::Unreadable(_) | CallError::Request(_) => {
                    // This call's own trouble: the source is asked on.
                    tracing::warn!(source = %source.name, order_ref = ?order_ref, call = %source.api.describe(&ask), error = %err, "gateway API call failed (its order is asked again next run)");
                    all_answered = false;
                    continue;
                }
            };
            report.stopped = Some(why);
            // This order and the rest wait for the next run.
            report.not_asked.extend(order_ref);
            report
                .not_asked
                .extend(work.filter_map(|(order_ref, _)| order_ref));
            return report;
        }
        if !all_answered {
            report.not_asked.extend(order_ref);
        }
    }
    report
}
