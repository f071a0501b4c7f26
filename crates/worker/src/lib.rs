//! oncehook-worker as a library. The rooms, in the order a message meets
//! them: `consumer` (the handler: decode, hand to the pipeline, turn the
//! result into the verdict `oncehook_common::consume` settles; the
//! session's relay and sweeper) → `pipeline` (grouping, then one
//! transaction per group: claim, effect, outcomes, commit) → `ledger` (the
//! effect: the order ledger's facts, recompute, stock, emails, parking) →
//! `relay` (publishes committed outbox emails). `retention` trims the dedup
//! table.

pub mod consumer;
pub mod ledger;
pub mod pipeline;
pub mod relay;
pub mod retention;
