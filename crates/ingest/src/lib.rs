//! oncehook-ingest as a library, so tests can start it in-process on a
//! random port. `startup` wires the server; `publisher` owns the broker
//! session; `routes` hold the handlers; `error` maps failures to HTTP;
//! `refusals` logs what ingest refuses, at the level of whoever is at fault;
//! `admission` holds each source to its rate and picks each delivery's lane.

pub mod admission;
pub mod error;
pub mod publisher;
pub mod refusals;
pub mod routes;
pub mod sources;
pub mod startup;
