//! Talking to the gateways' own APIs, the layer under both callers that do
//! it — the reconciler (`oncehook-reconcile`: what the webhooks missed) and
//! the refunder (`oncehook-refunds`: money owed back). `client` makes one
//! call over HTTP from the request a gateway's folder describes and hands
//! the answer back to the folder; `ApiSource` is a configured source with
//! an API (its gateway, base URL and credentials); `store` reads the
//! orders asked about, with what each gateway knows them as; `publish`
//! sends the facts an answer proves to the events exchange, where the
//! worker's ledger applies them like any webhook's.
//!
//! Nothing here knows a gateway (its requests, authentication and answers
//! are its folder's, `oncehook_gateways`), and nothing here decides what
//! to ask or when: that is the callers'.

pub mod client;
pub mod publish;
pub mod store;

pub use client::{ApiSource, CallError, Client};
pub use publish::{PublishError, Publisher};
