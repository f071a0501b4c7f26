//! The order ledger (docs/ledger.md) as a library. This file is its face:
//! the rooms and what they give out. [`Ledger`] (`effect`) is the worker's
//! one effect and the one entry of every road ([`Ledger::apply`]); the
//! inputs are `input`'s ([`Deliveries`], [`Create`], [`Known`], [`Cancel`],
//! [`CatchUp`]); `roads` sends each down its head (`deliveries`, `waiting`,
//! `cancel`, `catch_up`) and then the one `tail`; `rollout` catches up what
//! an older release wrote; `store` is its tables; `view` and `render` the
//! order as the shop sees it; `relay` and `parking` its background work.
//! Imports run down only: face → effect → rollout → roads → heads → tail
//! → the parts (`plan`, `record`, `recompute`, `state`, `stock`, `emails`,
//! `order_events`, `refund_intents`, `outcome`, `facts`) → `store`.
//!
//! Every event becomes a fact (`facts`) — a payment attempt, a refund, a
//! link from a payment to its order. For a group, in a fixed number of
//! statements whatever its size:
//!
//! 1. lock the order references and then the payments the group names
//!    (advisory locks, each in key order) and the orders it names (by the
//!    shop's reference or a gateway's one) or its payments are linked to
//!    (in id order) — the one lock order of every road (docs/ledger.md);
//! 2. place every event (`plan`): its order by reference, else by its
//!    payment's link (one recorded already or one the group makes), else it
//!    waits (`parking`) for its payment's link, or for its order when it
//!    names one no order has yet;
//! 3. take back the events parked for the payments the group links;
//! 4. record every link, attempt and refund (`record`), one statement;
//! 5. recompute every order a new fact touched from *all* its facts
//!    (`recompute`, with the pure `state::compute`): status, refunds,
//!    primary payment, flags, the one stock movement (`stock`), and the
//!    refund intents the orders owe (`refund_intents`);
//! 6. write the emails (`emails`: one confirmation per order, one per
//!    refund fact) and the order events for the shop (`order_events`: each
//!    derived from one fact), and park what stays unlinked;
//! 7. tell the pipeline each event's outcome (`outcome`).
//!
//! So the books depend on the set of events, not on the order or number of
//! their deliveries, nor on how they were grouped.

pub mod cancel;
mod catch_up;
mod deliveries;
mod effect;
mod emails;
mod facts;
mod input;
mod order_events;
mod outcome;
mod parking;
mod plan;
mod recompute;
mod record;
mod refund_intents;
mod relay;
pub mod render;
mod roads;
pub mod rollout;
mod state;
mod stock;
pub mod store;
mod tail;
pub mod view;
mod waiting;

pub use effect::Ledger;
pub use input::{Cancel, CatchUp, Create, Creation, Deliveries, Known, Registered};
/// Every order event type, in the order docs/shop-integration.md lists them.
pub use order_events::TYPES as ORDER_EVENT_TYPES;
pub use refund_intents::intent_id;
pub use roads::Input;

pub use emails::money;
/// Why the ledger could not take an input in (a database error, or for a
/// delivery, one that will never succeed as is).
pub use oncehook_pipeline::EffectError;
