//! oncehook-worker as a library. The pieces, in the order a message meets
//! them: `consumer` (the handler: decode, process, decide the verdict that
//! `oncehook_common::consume` settles; the session's relay and sweeper) → `processor`
//! (one transaction: `dedup` insert-first, then the `effect`; events not
//! linked to an order yet wait in `parking`) → `relay`
//! (publishes committed outbox emails). `retention` trims the dedup table.
//! With `[worker] batch.size` above 1, `batch` groups several deliveries
//! into one transaction (group commit) before falling back to `processor`'s
//! one transaction per delivery.
//! `commerce` is the built-in effect every test exercises: the order ledger,
//! whose state function is the pure `ledger`.

pub mod batch;
pub mod commerce;
pub mod consumer;
pub mod dedup;
pub mod effect;
pub mod ledger;
pub mod parking;
pub mod processor;
pub mod relay;
pub mod retention;
