//! The reading a lookup that lists the payment's refunds shares, whatever
//! the gateway: of the refunds that are the attempt's, which one is the
//! attempt's refund and which facts the page proves. Which refunds are
//! the attempt's (a receipt, a key, metadata) and when a page is full stay
//! the gateway's folder's knowledge.

use super::RefundOutcome;

/// What a lookup's page says of the attempt, given the refunds on it that
/// are the attempt's (`mine`, in the page's order), each read by `read`:
/// the first one accepted is the attempt's refund, with the facts of every
/// accepted one (a refund made twice before oncehook looked is two facts);
/// else the first one's outcome (failed, refused, "try again"); `absent`
/// when none is there ([`RefundOutcome::NotFound`], or
/// [`RefundOutcome::FullPage`] where a full page asks for the next).
pub(crate) fn attempts_refund<T>(
    mine: impl IntoIterator<Item = T>,
    absent: RefundOutcome,
    read: impl FnMut(T) -> RefundOutcome,
) -> RefundOutcome {
    let mut accepted = None;
    let mut facts = Vec::new();
    let mut first = None;
    for outcome in mine.into_iter().map(read) {
        match outcome {
            RefundOutcome::Accepted {
                refund_id,
                facts: proved,
            } => {
                accepted.get_or_insert(refund_id);
                facts.extend(proved);
            }
            other => {
                first.get_or_insert(other);
            }
        }
    }
    match accepted {
        Some(refund_id) => RefundOutcome::Accepted { refund_id, facts },
        None => first.unwrap_or(absent),
    }
}

#[cfg(test)]
#[path = "lookup_tests.rs"]
mod tests;
