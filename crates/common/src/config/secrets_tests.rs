use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

/// A ring entry whose key is 32 times `byte`.
fn line(kid: &str, byte: u8) -> String {
    format!("{kid}:{}", STANDARD.encode([byte; 32]))
}

#[test]
fn unset_or_empty_is_no_ring() {
    assert!(load_env(&[]).expect("defaults").secrets.keys.is_none());
    let c = load("[secrets]\nkeys = \"\"\n", &[]).expect("empty");
    assert!(c.secrets.keys.is_none());
}

#[test]
fn the_ring_is_read_from_the_variable_or_the_file() {
    let text = format!("{},{}", line("new", 2), line("old", 1));
    let c = load_env(&[(ENV_SECRET_KEYS, &text)]).expect("a ring");
    let ring = c.secrets.keys.expect("set");
    assert_eq!(ring.kids().collect::<Vec<_>>(), ["new", "old"]);
    let c = load(&format!("[secrets]\nkeys = \"{text}\"\n"), &[]).expect("a ring");
    assert_eq!(c.secrets.keys.expect("set").active_kid(), "new");
    // The environment wins.
    let c = load(
        &format!("[secrets]\nkeys = \"{text}\"\n"),
        &[(ENV_SECRET_KEYS, &line("env", 3))],
    )
    .expect("a ring");
    assert_eq!(c.secrets.keys.expect("set").active_kid(), "env");
}

#[test]
fn a_malformed_ring_is_refused_by_name_never_quoted() {
    let key = STANDARD.encode([9u8; 32]);
    for (value, says) in [
        (format!("k1:{key},k1:{key}"), "entry 2"),
        (format!("k1:{key},"), "entry 2"),
        (key.clone(), "entry 1"),
        (format!("k1:{}", &key[..20]), "entry 1"),
        (format!("Sekr1t{}:{key}", &key[..8]), "entry 1"),
    ] {
        let text = refused_env(&[(ENV_SECRET_KEYS, &value)]);
        assert!(
            text.contains(ENV_SECRET_KEYS) && text.contains("secrets.keys"),
            "{text}"
        );
        assert!(text.contains(says), "{text}");
        assert!(
            !text.contains(&key[..8]) && !text.contains("Sekr1t"),
            "{text}"
        );
    }
    let text = refused(&format!("[secrets]\nkeys = 5\nnope = \"{key}\"\n"), &[]);
    assert!(!text.contains(&key[..8]), "{text}");
    let text = refused("[secrets]\nkeys = 12345\n", &[]);
    assert!(
        text.contains("secrets.keys") && !text.contains("12345"),
        "{text}"
    );
}

#[test]
fn the_configuration_never_prints_the_keys() {
    let key = STANDARD.encode([9u8; 32]);
    let c = load_env(&[(ENV_SECRET_KEYS, &format!("k1:{key}"))]).expect("a ring");
    let debug = format!("{c:?}");
    assert!(
        debug.contains("\"k1\"") && !debug.contains(&key[..8]),
        "{debug}"
    );
}
