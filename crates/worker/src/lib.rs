//! oncehook-worker as a library. The pieces, in the order a message meets
//! them: `consumer` (session loop, acks, dead-lettering) → `processor`
//! (one transaction: `dedup` insert-first, then the `effect`) → `relay`
//! (publishes committed outbox emails). `retention` trims the dedup table.
//! `commerce` is the built-in effect every test exercises.

pub mod commerce;
pub mod consumer;
pub mod dedup;
pub mod effect;
pub mod processor;
pub mod relay;
pub mod retention;
