//! The sources ingest serves: the file's `[[source]]`s, fixed at start, and
//! those made at runtime, read from the admin API's sources feed
//! (`[ingest.sources_feed]`, docs/tenants.md) every second — so a source
//! added, rotated or disabled is served as such within about two seconds,
//! without a restart. Ingest has no database: the feed is one HTTP request
//! per second per ingest, answered with the changes since the last version
//! read (nothing when nothing changed), and a webhook is looked up in memory
//! only, never with a round trip. A file source wins over a runtime one of
//! the same name. A feed that cannot be read keeps what was known; a source
//! whose secrets do not open with this ingest's key ring is logged and left
//! as it was.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use oncehook_common::SourceConfig;
use oncehook_common::config::SourcesFeed;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::sealed::KeyRing;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::sources_feed::{FeedPage, Served};
use oncehook_gateways::Gateway;

/// How long one read of the feed may take.
const FEED_TIMEOUT: Duration = Duration::from_secs(5);

/// What a webhook's `{source}` names.
pub enum Lookup {
    Active(Arc<SourceConfig>),
    /// Answered 503 with `Retry-After` (docs/tenants.md, "Disabling").
    Disabled,
    /// Not a file source, and the feed was never read yet: 503, so the
    /// gateway asks again rather than hear of no such source.
    NotYet,
    Unknown,
}

/// A runtime source as it is served.
enum Entry {
    Active(Arc<SourceConfig>),
    Disabled,
}

#[derive(Default)]
struct Runtime {
    /// The newest feed version read; `None` until the first read (with a
    /// feed configured).
    version: Option<i64>,
    by_name: HashMap<String, Entry>,
}

/// The file's sources and the runtime ones, shared by the handlers and the
/// feed reader.
pub struct Sources {
    file: HashMap<String, Arc<SourceConfig>>,
    runtime: RwLock<Runtime>,
}

impl Sources {
    /// The file's sources, and whether runtime ones will come from a
    /// feed (until its first read, a name not in the file is [`Lookup::NotYet`]).
    pub fn new(file: &[SourceConfig], feed: bool) -> Sources {
        Sources {
            file: file
                .iter()
                .map(|s| (s.name.clone(), Arc::new(s.clone())))
                .collect(),
            runtime: RwLock::new(Runtime {
                version: (!feed).then_some(0),
                by_name: HashMap::new(),
            }),
        }
    }

    /// What `name` is.
    pub fn lookup(&self, name: &str) -> Lookup {
        if let Some(s) = self.file.get(name) {
            return Lookup::Active(s.clone());
        }
        let runtime = self.runtime.read().unwrap_or_else(|p| p.into_inner());
        match runtime.by_name.get(name) {
            Some(Entry::Active(s)) => Lookup::Active(s.clone()),
            Some(Entry::Disabled) => Lookup::Disabled,
            None if runtime.version.is_none() => Lookup::NotYet,
            None => Lookup::Unknown,
        }
    }

    /// The gateway of a known source (for refusal logs).
    pub fn gateway(&self, name: &str) -> Option<Gateway> {
        match self.lookup(name) {
            Lookup::Active(s) => Some(s.gateway),
            _ => None,
        }
    }

    /// The `source` label of `name`'s metrics: a file source's own name
    /// (the file bounds them); `runtime` for every source made at runtime
    /// (ten thousand tenants must not mint ten thousand label values on
    /// hot series: their figures come from `oncehookctl stats --tenant`);
    /// `unknown` for a name that is no source (the sender's, attacker
    /// controlled).
    pub fn label(&self, name: &str) -> &'static str {
        if self.file.contains_key(name) {
            return "file";
        }
        let runtime = self.runtime.read().unwrap_or_else(|p| p.into_inner());
        if runtime.by_name.contains_key(name) {
            "runtime"
        } else {
            "unknown"
        }
    }

    /// The file's sources' names.
    pub fn file_names(&self) -> impl Iterator<Item = &str> {
        self.file.keys().map(String::as_str)
    }

    fn version(&self) -> i64 {
        self.runtime
            .read()
            .map(|r| r.version.unwrap_or(0))
            .unwrap_or(0)
    }

    /// Takes a page of the feed in: every source it holds replaces what was
    /// known of it, except one that does not open (logged, left as it was).
    /// Returns the names of sources new to this ingest.
    fn apply(&self, page: FeedPage, ring: &KeyRing) -> Vec<String> {
        let mut opened = Vec::with_capacity(page.sources.len());
        for source in &page.sources {
            match source.open(ring) {
                Ok(served) => opened.push((source.name.clone(), served)),
                Err(why) => tracing::error!(
                    source = %source.name,
                    error = %why,
                    "a source of the sources feed does not open with this ingest's key ring \
                     (secrets.keys): it is served as before"
                ),
            }
        }
        let mut runtime = self.runtime.write().unwrap_or_else(|p| p.into_inner());
        let mut new = Vec::new();
        for (name, served) in opened {
            if self.file.contains_key(&name) {
                tracing::warn!(source = %name, "a runtime source has a file source's name: the file's is served");
                continue;
            }
            let (entry, state) = match served {
                Served::Active(s) => (Entry::Active(Arc::from(s)), "active"),
                Served::Disabled { .. } => (Entry::Disabled, "disabled"),
            };
            tracing::info!(source = %name, state, "runtime source taken from the feed");
            if runtime.by_name.insert(name.clone(), entry).is_none() {
                new.push(name);
            }
        }
        runtime.version = Some(page.version);
        new
    }
}

/// Reads the feed every `feed.every` until `shutdown`.
pub async fn follow(sources: Arc<Sources>, feed: SourcesFeed, ring: KeyRing, shutdown: Shutdown) {
    let client = match reqwest::Client::builder().timeout(FEED_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for the sources feed: runtime sources are not served");
            return;
        }
    };
    Periodic::every("sources feed", feed.every)
        .logs(
            "reading the sources feed failed; the sources known stay as they are",
            "the sources feed is read again",
        )
        .run(&shutdown, || async {
            let page = read(&client, &feed, sources.version()).await?;
            let new = sources.apply(page, &ring);
            crate::routes::zero_counters(new.iter().map(String::as_str));
            Ok::<_, FeedError>(Next::Pause)
        })
        .await;
}

/// Why a read of the feed failed.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("asking the sources feed at {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the sources feed at {url} answered {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the sources feed at {url} answered what is not a feed page: {source}")]
    Malformed {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

async fn read(
    client: &reqwest::Client,
    feed: &SourcesFeed,
    since: i64,
) -> Result<FeedPage, FeedError> {
    let url = format!("{}/v1/admin/feed/sources", feed.url);
    let http = |source| FeedError::Http {
        url: url.clone(),
        source,
    };
    let answer = client
        .get(&url)
        .query(&[("since", since)])
        .bearer_auth(feed.key.expose())
        .send()
        .await
        .map_err(http)?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(http)?;
    if !status.is_success() {
        return Err(FeedError::Refused {
            url,
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body).chars().take(300).collect(),
        });
    }
    serde_json::from_slice(&body).map_err(|source| FeedError::Malformed { url, source })
}
