//! The store: the SQL of each table or aggregate, one module per owner
//! (behind the `db` feature). It starts with retention of the dedup table,
//! shared by the worker's schedule and `oncehookctl retention`, and will
//! collect every table's SQL (dedup, orders/ledger, outbox, dead letters…)
//! so that a schema change is a migration plus one module here.

pub mod retention;
