//! The one supervisor of a broker session, for ingest's publisher and for
//! the consume loop of the worker and the mailer: connect to a node of the
//! list (in rotation, see `broker_nodes`), open the session (declare the
//! topology, open its channels), serve until the connection breaks or
//! shutdown, close up and start over.
//!
//! Every pause — after a node refused the connection, after a session that
//! could not be opened, after one that broke — is the next delay of one
//! [`RetryPolicy`] (exponential, jittered); the delays start over from the
//! shortest once a session opened. Readiness is down whenever no session
//! serves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::ExponentialBackoff;
use lapin::Connection;

use crate::amqp::{self, CONNECT_ATTEMPT_TIMEOUT};
use crate::broker_nodes::BrokerNodes;
use crate::health::Readiness;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;

/// Why a session stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Broker(#[from] lapin::Error),
    /// The connection or a channel went away without an error to show.
    #[error("{0}")]
    Lost(&'static str),
}

/// What one kind of session does on each new connection.
pub trait Session: Send {
    /// What [`Session::open`] hands to [`Session::serve`] (its channels).
    type Open: Send;

    /// Waits for what the session needs besides the broker (the consumers:
    /// Postgres and its schema) before each connection; `false` when
    /// shutdown came first. Nothing to wait for by default.
    fn prepare(&mut self, shutdown: &Shutdown) -> impl Future<Output = bool> + Send {
        let _ = shutdown;
        std::future::ready(true)
    }

    /// Sets up on a fresh connection: declares the topology, opens channels.
    fn open(
        &mut self,
        conn: &Arc<Connection>,
    ) -> impl Future<Output = lapin::Result<Self::Open>> + Send;

    /// Works until the connection breaks (`Err`), or until shutdown or the
    /// broker ends the work (`Ok`); closes its own channels before it
    /// returns, and sets readiness while it serves.
    fn serve(
        &mut self,
        conn: &Arc<Connection>,
        open: Self::Open,
        shutdown: &Shutdown,
    ) -> impl Future<Output = Result<(), SessionError>> + Send;
}

/// Runs sessions of one binary until shutdown.
#[derive(Debug, Clone)]
pub struct Supervisor {
    nodes: BrokerNodes,
    /// The connection name shown in the broker's UI (`oncehook-ingest`, …).
    name: &'static str,
    policy: RetryPolicy,
}

impl Supervisor {
    /// Connections named `name` to `nodes`, pausing by `policy` (normally
    /// [`RetryPolicy::BROKER_CONNECT`]).
    pub fn new(nodes: BrokerNodes, name: &'static str, policy: RetryPolicy) -> Self {
        Supervisor {
            nodes,
            name,
            policy,
        }
    }

    /// Connects, opens and serves `session` again and again until shutdown.
    pub async fn run(
        &self,
        session: &mut impl Session,
        readiness: &Readiness,
        shutdown: &Shutdown,
    ) {
        let mut pauses = Pauses::new(self.policy);
        while !shutdown.is_triggered() {
            if !session.prepare(shutdown).await {
                break;
            }
            let attempt = tokio::select! {
                attempt = amqp::connect_next(&self.nodes, self.name, CONNECT_ATTEMPT_TIMEOUT) => attempt,
                () = shutdown.wait() => break,
            };
            let pause = match attempt {
                Ok(conn) => self.session(conn, session, &mut pauses, shutdown).await,
                Err(err) => {
                    let pause = pauses.next();
                    let retry_in_ms = pause.as_millis() as u64;
                    tracing::warn!(%err, retry_in_ms, "broker not reachable; retrying");
                    pause
                }
            };
            readiness.set(false);
            if !shutdown.sleep(pause).await {
                break;
            }
        }
        readiness.set(false);
    }

    /// One session on a fresh connection, closed afterwards; returns the
    /// pause before the next connection.
    async fn session(
        &self,
        conn: Connection,
        session: &mut impl Session,
        pauses: &mut Pauses,
        shutdown: &Shutdown,
    ) -> Duration {
        let conn = Arc::new(conn);
        let pause = match session.open(&conn).await {
            Ok(open) => {
                pauses.reset();
                let ended = session.serve(&conn, open, shutdown).await;
                let pause = pauses.next();
                if let Err(err) = ended
                    && !shutdown.is_triggered()
                {
                    let retry_in_ms = pause.as_millis() as u64;
                    tracing::warn!(%err, retry_in_ms, "broker session ended; reconnecting");
                }
                pause
            }
            Err(err) => {
                let pause = pauses.next();
                let retry_in_ms = pause.as_millis() as u64;
                tracing::error!(%err, retry_in_ms, "opening the broker session failed (topology or channels); reconnecting");
                pause
            }
        };
        let _ = conn.close(200, "session ends".into()).await;
        pause
    }
}

/// The delays between attempts: one policy's backoff, started over once a
/// session opened. A policy whose attempts are used up keeps its longest
/// delay (a supervisor never gives up before shutdown).
#[derive(Debug)]
struct Pauses {
    policy: RetryPolicy,
    delays: ExponentialBackoff,
}

impl Pauses {
    fn new(policy: RetryPolicy) -> Self {
        Pauses {
            policy,
            delays: policy.backoff(),
        }
    }

    fn next(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.policy.max_delay)
    }

    fn reset(&mut self) {
        self.delays = self.policy.backoff();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(pauses: &mut Pauses, n: usize) -> Vec<u128> {
        (0..n).map(|_| pauses.next().as_millis()).collect()
    }

    #[test]
    fn pauses_grow_while_nothing_opens_and_start_over_once_a_session_opened() {
        let mut pauses = Pauses::new(RetryPolicy::DATABASE_WAIT);
        assert_eq!(ms(&mut pauses, 7), [200, 400, 800, 1600, 3200, 5000, 5000]);
        pauses.reset();
        assert_eq!(ms(&mut pauses, 2), [200, 400]);
    }

    #[test]
    fn a_policy_with_few_attempts_keeps_its_longest_delay() {
        let mut pauses = Pauses::new(RetryPolicy::DATABASE_WAIT.with_max_attempts(2));
        assert_eq!(ms(&mut pauses, 3), [200, 5000, 5000]);
    }

    #[test]
    fn broker_pauses_are_jittered_within_the_policy() {
        let mut pauses = Pauses::new(RetryPolicy::BROKER_CONNECT);
        let first: Vec<_> = (0..50)
            .map(|_| {
                pauses.reset();
                pauses.next()
            })
            .collect();
        let policy = RetryPolicy::BROKER_CONNECT;
        assert!(
            first
                .iter()
                .all(|d| *d >= policy.min_delay && *d <= policy.min_delay * 2),
            "{first:?}"
        );
        assert!(first.iter().any(|d| *d != first[0]), "jittered: {first:?}");
        for _ in 0..20 {
            assert!(pauses.next() <= policy.max_delay * 2);
        }
    }
}
