//! The broker as every binary holds it: one supervised session at a time
//! (`session`: connect to a node, open, serve, pause, reconnect — the same
//! loop for ingest's publisher and for the consumers) and looking at queues
//! without changing them (`queues`: the one passive declare, and the queue
//! gauges).

pub mod queues;
pub mod session;

pub use session::{Session, SessionError, Supervisor};
