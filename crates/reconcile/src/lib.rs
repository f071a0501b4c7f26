//! The reconciler (docs/reconciliation.md): a webhook that never reached
//! ingest is not lost for good. Every so often the worker asks each
//! gateway's own API about the orders still pending (and, less often, the
//! orders paid lately, for refunds whose webhook was lost), and every payment
//! state it finds goes down the same path as a webhook: an envelope of
//! origin `reconciliation` on the events exchange, applied by the same
//! ledger, whose facts are keyed so that a webhook arriving later, or a
//! second pass, changes nothing.
//!
//! The rooms, in the order a pass meets them: `schedule` (the worker's
//! task: the lock, the interval) → `run` (one pass: orders in scope, one
//! task per source, each answer looked up in the ledger and its new facts
//! published as it comes) → `source` (asking one source: its calls, their
//! follow-ups, giving it up after its retries) →
//! `ask` (which source to ask about an order; pure) → `limits` (the run's
//! budget, a source's pace, retries); `store` is its SQL, `report` what a
//! pass tells its caller. The HTTP call, the sources, the orders asked
//! about and publishing are `oncehook_gateway_api`'s, shared with the
//! refunder.
//!
//! Nothing here knows a gateway: what to ask it, each call's request and
//! authentication, which answer means "no such id" and how an answer
//! becomes facts are the gateway's folder's, behind
//! `oncehook_gateways::reconcile::GatewayApi`; this crate makes the calls.

pub mod ask;
pub mod limits;
pub mod report;
pub mod run;
pub mod schedule;
mod settle;
mod source;
pub mod store;

pub use oncehook_gateway_api::ApiSource;
pub use report::{Found, Report};
pub use run::{Reconciler, RunError, Scope};
