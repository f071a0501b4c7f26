//! `oncehook-api`: the shop's machine-to-machine API (docs/shop-integration.md).
//! `startup` wires it; `routes` are the endpoints in one table; `auth`
//! checks keys and scopes; `validate` checks what a shop sends; `model` is
//! what it reads and answers (the order and its events are the ledger's
//! view, `oncehook_ledger::view`); `audit` records every write; `openapi`
//! describes it all; `prune` forgets idempotency keys older than
//! `api.idempotency_ttl`; `store` is the API's own tables' SQL (the books
//! it writes are the ledger's, `oncehook_ledger::store::shop`).

pub mod admin_model;
pub mod audit;
pub mod auth;
pub mod disabled;
pub mod error;
pub mod issued;
pub mod model;
pub mod openapi;
pub mod prune;
pub mod routes;
pub mod startup;
pub mod state;
pub mod store;
pub mod validate;
