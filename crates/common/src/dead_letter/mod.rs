//! Dead letters, in one place: the kinds ([`DeadLetterKind`], every one in
//! one list, with the counter each is counted in), writing a dead letter
//! (the `x-oncehook-*` headers of its copy, publishing it with a confirm,
//! the headers of a replayed copy) and reading one back (its [`Record`] and
//! its ID). The consume loop, the worker's parked-event sweeper,
//! `oncehookctl dlq`, the console and the tests all go through here.
//!
//! The header names are a wire format shared with letters already in a
//! queue; docs/operations.md lists them and the kinds.

mod kind;
mod read;
mod write;

pub use kind::{DeadLetterKind, OtherKind, Writer, count, zero_counters};
pub use read::{DeadLetteredBy, Record};
pub use write::{
    DeadLetter, HEADER_ATTEMPTS, HEADER_DEAD_ID, HEADER_ERROR, HEADER_ERROR_KIND, HEADER_FAILED_AT,
    HEADER_ORIGIN, HEADER_REPLAYS, HEADER_ROUTING_KEY, publish, replay_headers, replays,
    with_replays,
};

#[cfg(test)]
mod tests;
