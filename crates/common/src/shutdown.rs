//! Graceful shutdown: one `Shutdown` handle per process, triggered by SIGTERM
//! or SIGINT, that every task can wait on or poll. Tasks stop taking new work
//! when it fires and finish what they hold.

use std::time::Duration;

use tokio::sync::watch;

/// A cloneable "stop now" signal.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Self {
            rx,
            tx: std::sync::Arc::new(tx),
        }
    }

    /// A handle that also fires on SIGTERM / SIGINT.
    pub fn on_signals() -> Self {
        let this = Self::new();
        let trigger = this.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            // Trigger first: nothing (not even logging) may stand between a
            // signal and the shutdown it asks for.
            trigger.trigger();
            tracing::info!("shutdown signal received; finishing in-flight work");
        });
        this
    }

    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// Sleeps for `pause`: `true` once it passed, `false` as soon as
    /// shutdown is triggered.
    pub async fn sleep(&self, pause: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(pause) => true,
            () = self.wait() => false,
        }
    }

    /// Resolves once shutdown was triggered.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        // An error means the sender is gone, which only happens at exit.
        let _ = rx.wait_for(|v| *v).await;
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
