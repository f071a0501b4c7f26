//! oncehookctl's verbs as a library: each module builds a typed report
//! (`Serialize + Display`) that the `oncehookctl` binary prints as text or
//! JSON and the operators' console (`oncehook-console`) renders as HTML, so
//! both act on dead letters, traces and stats the same way — the same peek
//! lock, the same replay-then-remove order, the same words.

pub mod api_key;
pub mod broker;
pub mod demo;
pub mod dlq;
pub mod migrate;
pub mod notify;
pub mod operator;
pub mod output;
pub mod password;
pub mod reconcile;
pub mod refunds;
pub mod retention;
pub mod send;
pub mod sources;
pub mod stats;
pub mod store;
pub mod tenants;
pub mod timefmt;
pub mod trace;
