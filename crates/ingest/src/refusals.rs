//! How ingest logs what it refuses. Whoever is at fault decides the level:
//! a request that is bad — a wrong signature, a body that cannot be read,
//! an unknown source, too large, not even HTTP — is its sender's fault and
//! anyone on the internet can send thousands of them, so it is logged at
//! WARN, and at most one line per reason per second; the lines held back
//! are counted, and the count is written with the next line of that reason
//! (or within a second or so once the burst is over). ERROR is left for
//! what the operator must fix: the broker unreachable, a misconfiguration.
//!
//! The HTTP layer (actix) logs the requests it cannot parse at ERROR
//! itself, before ingest's code sees them; [`init_logging`] takes those
//! events out of the log and writes them here, as the WARN they are.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use oncehook_common::config::TelemetryConfig;
use oncehook_common::otel::Traces;
use oncehook_common::telemetry::{self, Diversion};
use tracing::{Level, Metadata};

/// At most one line per reason in this time.
const EVERY: Duration = Duration::from_secs(1);
/// How often the counts of finished bursts are looked for.
const FLUSH_TICK: Duration = Duration::from_millis(250);
/// The reason of every refusal by the HTTP layer.
const MALFORMED_HTTP: &str = "malformed_http";
/// How much of a name the sender chose goes into the log.
const NAME_LOG_LIMIT: usize = 64;

/// The limit shared by every request handler and the HTTP layer's events.
static LIMIT: LazyLock<LineLimit> = LazyLock::new(|| LineLimit::new(EVERY));

/// At most one line per reason per `every`; the lines held back are
/// counted until the next line of that reason, which reports them.
pub struct LineLimit {
    every: Duration,
    windows: Mutex<HashMap<&'static str, Window>>,
}

struct Window {
    /// When the last line of this reason was written.
    logged_at: Instant,
    /// Lines held back since.
    held_back: u64,
}

impl LineLimit {
    pub fn new(every: Duration) -> Self {
        LineLimit {
            every,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(n)`: write this line now, with `n` lines of its reason held
    /// back since the previous one; `None`: hold it back (it is counted).
    pub fn admit(&self, reason: &'static str, now: Instant) -> Option<u64> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        match windows.get_mut(reason) {
            None => {
                windows.insert(
                    reason,
                    Window {
                        logged_at: now,
                        held_back: 0,
                    },
                );
                Some(0)
            }
            Some(w) if now.saturating_duration_since(w.logged_at) >= self.every => {
                w.logged_at = now;
                Some(std::mem::take(&mut w.held_back))
            }
            Some(w) => {
                w.held_back = w.held_back.saturating_add(1);
                None
            }
        }
    }

    /// The reasons whose second is over with lines held back, and how many:
    /// a line reporting the count is due (and counts as that reason's line).
    pub fn due(&self, now: Instant) -> Vec<(&'static str, u64)> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut due = Vec::new();
        for (reason, w) in windows.iter_mut() {
            if w.held_back > 0 && now.saturating_duration_since(w.logged_at) >= self.every {
                due.push((*reason, std::mem::take(&mut w.held_back)));
                w.logged_at = now;
            }
        }
        due.sort_unstable();
        due
    }
}

/// Logs one request ingest refused because of what its sender sent
/// (`code` is the refusal's machine-readable reason), within the limit.
pub fn refused(
    source: &str,
    gateway: Option<&str>,
    code: &'static str,
    reason: &dyn std::fmt::Display,
    peer: Option<SocketAddr>,
) {
    let Some(suppressed) = LIMIT.admit(code, Instant::now()) else {
        return;
    };
    let peer = peer.map_or_else(|| "-".to_owned(), |p| p.to_string());
    // What the sender chose (the source's name, the reason's details) is
    // written quoted and escaped: a line break cannot forge a log line.
    tracing::warn!(
        source = ?truncated(source),
        gateway = %gateway.unwrap_or("-"),
        %code,
        reason = ?reason.to_string(),
        %peer,
        suppressed,
        "webhook refused"
    );
}

/// Writes the counts of the bursts that are over.
fn flush(now: Instant) {
    for (code, suppressed) in LIMIT.due(now) {
        tracing::warn!(
            %code,
            suppressed,
            "bad requests held back from the log (at most one line per reason per second)"
        );
    }
}

/// At most [`NAME_LOG_LIMIT`] characters of a name a sender chose.
fn truncated(name: &str) -> &str {
    match name.char_indices().nth(NAME_LOG_LIMIT) {
        Some((end, _)) => name.get(..end).unwrap_or(name),
        None => name,
    }
}

/// The HTTP layer's modules that serve one connection, by their log
/// target: what they log at ERROR is about that connection — its request
/// could not be parsed, it broke off, it stalled — the sender's fault.
/// (Their other ERROR lines, a streamed response body failing and an
/// upgrade handler failing, cannot come from ingest, which streams no
/// bodies and upgrades nothing.) The rest of `actix_http` — building the
/// service, its readiness — is the server's own trouble.
const CONNECTION_TARGETS: [&str; 2] = ["actix_http::h1::dispatcher", "actix_http::h1::decoder"];

/// Whether an event of the HTTP layer, by its target, is about one bad
/// connection rather than about the server.
fn is_senders_fault(target: &str) -> bool {
    CONNECTION_TARGETS.contains(&target)
}

/// The HTTP layer's events at ERROR: its own, never ingest's.
fn is_http_layer_error(meta: &Metadata<'_>) -> bool {
    *meta.level() == Level::ERROR && meta.target().starts_with("actix_http")
}

/// What the logging thread writes: the HTTP layer's events, in order.
struct HttpLayerEvent {
    message: String,
    /// `Some(n)`: a sender's fault, admitted by the limit with `n` lines of
    /// its reason held back before it; `None`: the server's own trouble.
    suppressed: Option<u64>,
}

/// Installs ingest's logging: [`telemetry::init_logging`], with the HTTP
/// layer's ERROR events re-levelled here, and a thread that writes them
/// (they arrive inside another logging call, which must not log) and the
/// counts of finished bursts.
pub fn init_logging(settings: &TelemetryConfig) -> Traces {
    let (events, inbox) = std::sync::mpsc::sync_channel::<HttpLayerEvent>(1024);
    let spawned = std::thread::Builder::new()
        .name("refusal-log".to_owned())
        .spawn(move || write_http_layer_events(inbox));
    if spawned.is_err() {
        // No thread, no re-levelling: the HTTP layer's lines stay as they are.
        let traces = telemetry::init_logging(settings, "oncehook-ingest");
        tracing::warn!(
            "could not start the refusal log thread; the HTTP layer logs at its own levels"
        );
        return traces;
    }
    telemetry::init_logging_diverting(
        settings,
        "oncehook-ingest",
        Diversion {
            diverts: is_http_layer_error,
            handler: Box::new(move |meta, message| divert(&events, meta.target(), message)),
        },
    )
}

/// Hands one HTTP-layer event to the logging thread. A sender's fault that
/// the limit holds back is only counted; a full queue drops the line (the
/// thread is behind on writing lines that are at most one per second).
fn divert(events: &SyncSender<HttpLayerEvent>, target: &str, message: String) {
    let suppressed = if is_senders_fault(target) {
        match LIMIT.admit(MALFORMED_HTTP, Instant::now()) {
            Some(n) => Some(n),
            None => return,
        }
    } else {
        None
    };
    let _ = events.try_send(HttpLayerEvent {
        message,
        suppressed,
    });
}

/// The logging thread: writes the HTTP layer's events and, every tick, the
/// counts of finished bursts.
fn write_http_layer_events(inbox: Receiver<HttpLayerEvent>) {
    loop {
        match inbox.recv_timeout(FLUSH_TICK) {
            Ok(HttpLayerEvent {
                message,
                suppressed: Some(suppressed),
            }) => tracing::warn!(
                code = %MALFORMED_HTTP,
                reason = ?message,
                suppressed,
                "malformed HTTP request refused"
            ),
            Ok(HttpLayerEvent {
                message,
                suppressed: None,
            }) => tracing::error!(detail = ?message, "HTTP server error"),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        flush(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason_per_interval_and_the_rest_counted() {
        let limit = LineLimit::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(limit.admit("a", t0), Some(0));
        assert_eq!(limit.admit("b", t0), Some(0), "reasons are apart");
        for ms in [1, 10, 999] {
            assert_eq!(limit.admit("a", t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(limit.due(t0 + Duration::from_millis(999)), vec![]);
        assert_eq!(
            limit.admit("a", t0 + Duration::from_millis(1000)),
            Some(3),
            "the next line reports what was held back"
        );
        assert_eq!(limit.admit("a", t0 + Duration::from_millis(1500)), None);
        assert_eq!(limit.due(t0 + Duration::from_millis(1999)), vec![]);
        assert_eq!(
            limit.due(t0 + Duration::from_millis(2000)),
            vec![("a", 1)],
            "a finished burst's count is due"
        );
        // The count line was that second's line.
        assert_eq!(limit.admit("a", t0 + Duration::from_millis(2500)), None);
        assert_eq!(limit.admit("a", t0 + Duration::from_millis(3000)), Some(1));
        assert_eq!(limit.due(t0 + Duration::from_secs(10)), vec![]);
    }

    #[test]
    fn the_http_layers_complaints_about_requests_are_the_senders_fault() {
        // Where actix-http logs "stream error: request parse error: …",
        // "write zero; closing", "Internal server error: unexpected eof"
        // (the dispatcher) and "MAX_BUFFER_SIZE unprocessed data reached"
        // (the decoder).
        for target in ["actix_http::h1::dispatcher", "actix_http::h1::decoder"] {
            assert!(is_senders_fault(target), "{target}");
        }
        // Where it logs "Initialization of HTTP service error" and "HTTP
        // service readiness error", and anything not of the HTTP layer.
        for target in [
            "actix_http::service",
            "actix_http::h1::service",
            "actix_http::h2::service",
            "actix_http",
            "oncehook_ingest::routes",
        ] {
            assert!(!is_senders_fault(target), "{target}");
        }
    }

    #[test]
    fn names_a_sender_chose_are_cut_short() {
        assert_eq!(truncated("razorpay"), "razorpay");
        let long = "é".repeat(100);
        assert_eq!(truncated(&long).chars().count(), NAME_LOG_LIMIT);
    }
}
