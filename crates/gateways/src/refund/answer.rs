//! Words the gateways' readings of refund answers share: the start of a
//! body for a message, "try again" for an answer a gateway's folder cannot
//! read, and the refusal of a refund the gateway names as another
//! payment's. The gateway's name is the caller's.

use super::RefundOutcome;

/// How much of a body a message quotes, in characters.
const QUOTED: usize = 200;

/// The start of an answer's body, for a message.
pub(crate) fn words(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(QUOTED).collect()
}

/// "Try again": `who` (`Razorpay`, `the toy`) answered `status` with a
/// body its folder does not read as an answer.
pub(crate) fn unreadable(who: &str, status: u16, body: &[u8]) -> RefundOutcome {
    RefundOutcome::Retry {
        reason: format!("{who} answered {status}: {}", words(body)),
    }
}

/// The refusal of an answer in which `who` names its refund `refund_id`
/// as a refund of `payment`, not of the payment asked about (`asked`).
pub(crate) fn payment_mismatch(
    who: &str,
    refund_id: &str,
    payment: &str,
    asked: &str,
) -> RefundOutcome {
    RefundOutcome::Refused {
        code: "payment_mismatch".into(),
        message: format!("{who} answered with refund {refund_id} of {payment}, not of {asked}"),
    }
}
