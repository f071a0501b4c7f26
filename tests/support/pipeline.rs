//! [`Pipeline`]: one test's whole pipeline started and ready — ingest, its
//! workers and a mailer, each past its `/readyz` — and where to post to it.
//! [`TestEnv::pipeline`] is the usual one (one worker, a mailer on the file
//! transport); [`TestEnv::pipeline_with`] takes a [`PipelineSpec`] for more
//! workers, an SMTP server, or no mailer.
//!
//! ```text
//! let mut env = TestEnv::new().await;
//! Shop::basket("order_1").seed(&env.pool).await;
//! let app = env.pipeline().await;
//! env.post_ok(&app.url, "razorpay", &env.captured("order_1", "pay_1", "evt_1")).await;
//! shop::wait_paid(&env.pool, "order_1").await;
//! ```
//!
//! The processes stop when the [`Pipeline`] is dropped; declare it after
//! the [`TestEnv`] so it goes first.

use crate::{Proc, TestEnv};

/// What [`TestEnv::pipeline_with`] starts.
#[derive(Clone, Debug)]
pub struct PipelineSpec {
    workers: usize,
    mailer: bool,
    smtp_url: Option<String>,
}

impl Default for PipelineSpec {
    /// One worker and a mailer on the file transport.
    fn default() -> Self {
        PipelineSpec {
            workers: 1,
            mailer: true,
            smtp_url: None,
        }
    }
}

impl PipelineSpec {
    /// `n` workers instead of one.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Every binary started from here on gets `ONCEHOOK_SMTP_URL=url`: the
    /// mailer sends there instead of writing files.
    pub fn smtp(mut self, url: &str) -> Self {
        self.smtp_url = Some(url.to_owned());
        self
    }

    /// No mailer: the emails wait in their queue.
    pub fn without_mailer(mut self) -> Self {
        self.mailer = false;
        self
    }
}

/// The started processes (stopped when dropped, consumers first) and the
/// base URL of ingest's public listener.
pub struct Pipeline {
    /// `http://127.0.0.1:PORT`: post webhooks to `{url}/webhooks/{source}`.
    pub url: String,
    pub mailer: Option<Proc>,
    pub workers: Vec<Proc>,
    pub ingest: Proc,
}

impl Pipeline {
    /// The first worker.
    pub fn worker(&self) -> &Proc {
        self.workers.first().expect("the pipeline has a worker")
    }

    /// Every process, in the order they were started.
    pub fn procs(&self) -> Vec<&Proc> {
        let mut all = vec![&self.ingest];
        all.extend(&self.workers);
        all.extend(&self.mailer);
        all
    }
}

impl TestEnv {
    /// Ingest, one worker and a mailer (file transport), all ready.
    pub async fn pipeline(&mut self) -> Pipeline {
        self.pipeline_with(PipelineSpec::default()).await
    }

    /// Ingest, then the workers one by one, then the mailer, each waited
    /// for until it is ready.
    pub async fn pipeline_with(&mut self, spec: PipelineSpec) -> Pipeline {
        if let Some(url) = &spec.smtp_url {
            self.set_env("ONCEHOOK_SMTP_URL", url);
        }
        let (ingest, url) = self.start_ingest().await;
        let mut workers = Vec::with_capacity(spec.workers);
        for _ in 0..spec.workers {
            workers.push(self.start_worker().await);
        }
        let mailer = match spec.mailer {
            true => Some(self.start_mailer().await),
            false => None,
        };
        Pipeline {
            url,
            mailer,
            workers,
            ingest,
        }
    }
}
