//! Ports for the binaries a test starts. A port taken with bind-to-0 and
//! released comes from the kernel's ephemeral range, the same range every
//! outgoing connection (to PostgreSQL, RabbitMQ, a receiver) draws its local
//! port from; between the release and the child's bind another connection
//! of any concurrent test binary could take it ("Address already in use").
//! So ports are drawn below that range, where the kernel never hands one
//! out by itself, and each is claimed across the test processes with a
//! marker file created exclusively, so two test binaries running side by
//! side never pick the same port while it is fresh.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

/// Ports at or above this are never chosen: the lowest the kernel might
/// hand out on its own (read from the system where it can be).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The lowest port chosen: well above the well-known and registered
/// services a developer machine may run.
const LOWEST: u16 = 20000;

/// A claim older than this is stale: its test has long bound the port or
/// ended.
const CLAIM_LIFETIME: Duration = Duration::from_secs(600);

fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("oncehook-test-ports")
}

/// Claims `port` for this process unless another test process claimed it
/// recently; a stale claim is taken over.
fn claim(port: u16) -> bool {
    let dir = claims_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let path = dir.join(port.to_string());
    let fresh = |p: &PathBuf| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < CLAIM_LIFETIME)
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(_) => true,
        Err(_) if fresh(&path) => false,
        // Stale: take it over; of two takers only one creates it again.
        Err(_) => {
            let _gone = std::fs::remove_file(&path);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .is_ok()
        }
    }
}

/// A free TCP port on 127.0.0.1, outside the ephemeral range, claimed for
/// this test process and bindable at the moment it is returned.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let top = ephemeral_floor().max(LOWEST + 1000);
    let span = u32::from(top - LOWEST);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let offset = (start + step) % span;
        let port = LOWEST + offset as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(port) {
            return port;
        }
    }
    panic!("no free port below the ephemeral range {top}");
}
