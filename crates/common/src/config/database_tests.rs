use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").database;
    assert_eq!(c.url.expose(), DEFAULT_DATABASE_URL);
    assert_eq!((c.max_connections, c.pooler), (None, Pooler::None));
}

#[test]
fn the_connection_budget_is_read_and_bounded() {
    let c = load_env(&[]).expect("defaults");
    assert_eq!(c.database.pool_size(20), 20, "unset: the binary's own size");
    let c = load_env(&[(ENV_DATABASE_MAX_CONNECTIONS, "3")]).expect("budget");
    assert_eq!(c.database.pool_size(20), 3);
    let text = refused_env(&[(ENV_DATABASE_MAX_CONNECTIONS, "1")]);
    assert!(text.contains(ENV_DATABASE_MAX_CONNECTIONS), "{text}");
}

#[test]
fn the_pooler_is_none_session_or_transaction() {
    for (value, pooler) in [
        ("none", Pooler::None),
        ("session", Pooler::None),
        ("transaction", Pooler::Transaction),
    ] {
        let c = load_env(&[(ENV_DATABASE_POOLER, value)]).expect(value);
        assert_eq!(c.database.pooler, pooler, "{value}");
    }
    let c = load("[database]\npooler = \"\"\n", &[]).expect("empty");
    assert_eq!(c.database.pooler, Pooler::None);
    let text = refused_env(&[(ENV_DATABASE_POOLER, "statement")]);
    assert!(
        text.contains(ENV_DATABASE_POOLER) && text.contains("transaction"),
        "{text}"
    );
}

#[test]
fn a_url_is_checked_without_being_printed() {
    let text = refused_env(&[(ENV_DATABASE_URL, "mysql://app:TOPSECRET@db/shop")]);
    assert!(
        text.contains(ENV_DATABASE_URL) && text.contains("postgres://"),
        "{text}"
    );
    assert!(!text.contains("TOPSECRET"), "{text}");
    let c = load_env(&[(ENV_DATABASE_URL, "postgresql://app:TOPSECRET@db/shop")]).expect("valid");
    assert_eq!(
        c.database.url.expose(),
        "postgresql://app:TOPSECRET@db/shop"
    );
    assert!(!format!("{c:?}").contains("TOPSECRET"));
    let text = refused("[database]\nurl = 5\n", &[]);
    assert!(
        text.contains("database.url") && !text.contains('5'),
        "{text}"
    );
}
