use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const OTHER: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

fn key(name: &str, hash: &str, scopes: &str) -> String {
    format!("[[api.key]]\nname = \"{name}\"\nhash = \"{hash}\"\nscopes = [{scopes}]\n")
}

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").api;
    assert_eq!(c.addr, "127.0.0.1:8082".parse().expect("addr"));
    assert!(c.keys.is_empty());
    assert_eq!(c.body_limit_bytes, 65_536);
    assert_eq!(c.max_items, 100);
    assert_eq!(c.max_page_size, 100);
    assert_eq!(c.auth_failures_per_minute, 20);
    assert_eq!(c.idempotency_ttl, std::time::Duration::from_secs(86_400));
}

#[test]
fn keys_are_read_from_the_file_and_checked() {
    let toml = format!(
        "{}{}",
        key("shop", HASH, "\"orders:write\", \"orders:read\""),
        key("stock", OTHER, "\"products:write\"")
    );
    let c = load(&toml, &[]).expect("two keys").api;
    assert_eq!(c.keys.len(), 2);
    assert_eq!(c.keys[0].name, "shop");
    assert_eq!(
        c.keys[0].scopes,
        [ApiScope::OrdersWrite, ApiScope::OrdersRead]
    );
    assert_eq!(c.keys[0].hash[0], 0x9f);
    assert!(
        !format!("{c:?}").contains("9f86d0"),
        "the hash is not printed"
    );

    let text = refused(&key("shop", HASH, "\"orders:delete\""), &[]);
    assert!(
        text.contains("unknown scope \"orders:delete\"") && text.contains("orders:write"),
        "{text}"
    );
    assert!(refused(&key("shop", "abc", "\"orders:read\""), &[]).contains("64 hex"));
    let not_hex = "z".repeat(64);
    assert!(refused(&key("shop", &not_hex, "\"orders:read\""), &[]).contains("64 hex"));
    assert!(refused(&key("shop", HASH, ""), &[]).contains("at least one scope"));
    assert!(refused(&key(" ", HASH, "\"orders:read\""), &[]).contains("needs a name"));
    assert!(refused(&key("unknown", HASH, "\"orders:read\""), &[]).contains("needs a name"));
    let twice = format!(
        "{}{}",
        key("shop", HASH, "\"orders:read\""),
        key("shop", OTHER, "\"orders:read\"")
    );
    assert!(refused(&twice, &[]).contains("configured twice"));
    let same_hash = format!(
        "{}{}",
        key("a", HASH, "\"orders:read\""),
        key("b", HASH, "\"orders:read\"")
    );
    assert!(refused(&same_hash, &[]).contains("same hash"));
}

#[test]
fn limits_and_the_address_come_from_the_environment() {
    let c = load_env(&[
        (ENV_API_ADDR, "0.0.0.0:9000"),
        (ENV_API_BODY_LIMIT_BYTES, "2048"),
        (ENV_API_MAX_ITEMS, "5"),
        (ENV_API_MAX_PAGE_SIZE, "10"),
        (ENV_API_AUTH_FAILURES_PER_MINUTE, "3"),
        (ENV_API_IDEMPOTENCY_TTL, "7d"),
    ])
    .expect("set")
    .api;
    assert_eq!(c.addr.port(), 9000);
    assert_eq!(
        (c.body_limit_bytes, c.max_items, c.max_page_size),
        (2048, 5, 10)
    );
    assert_eq!(c.auth_failures_per_minute, 3);
    assert_eq!(
        c.idempotency_ttl,
        std::time::Duration::from_secs(7 * 86_400)
    );
    for (env, value) in [
        (ENV_API_IDEMPOTENCY_TTL, "0s"),
        (ENV_API_IDEMPOTENCY_TTL, "soon"),
        (ENV_API_BODY_LIMIT_BYTES, "10"),
        (ENV_API_MAX_ITEMS, "0"),
        (ENV_API_MAX_PAGE_SIZE, "5000"),
        (ENV_API_ADDR, "nowhere"),
    ] {
        let text = refused_env(&[(env, value)]);
        assert!(text.contains(env), "{text}");
    }
}

#[test]
fn scopes_read_and_print_the_same_words() {
    for scope in ApiScope::ALL {
        assert_eq!(ApiScope::parse(scope.as_str()), Some(scope));
    }
    assert_eq!(ApiScope::parse("admin"), None);
}

fn admin(name: &str, hash: &str, scopes: &str) -> String {
    format!("[[api.admin_key]]\nname = \"{name}\"\nhash = \"{hash}\"\nscopes = [{scopes}]\n")
}

#[test]
fn admin_keys_are_read_apart_from_tenants_keys_and_checked() {
    let toml = format!(
        "{}{}",
        admin("platform", HASH, "\"admin\""),
        admin("feed", OTHER, "\"sources:feed\", \"sources:feed\"")
    );
    let c = load(&toml, &[]).expect("two admin keys").api;
    assert!(c.keys.is_empty());
    assert_eq!(c.admin_keys.len(), 2);
    assert_eq!(c.admin_keys[0].scopes, [AdminScope::Admin]);
    assert_eq!(c.admin_keys[1].scopes, [AdminScope::SourcesFeed]);
    assert!(
        !format!("{c:?}").contains("9f86d0"),
        "the hash is not printed"
    );

    for (toml, says) in [
        (admin("p", HASH, "\"orders:read\""), "unknown scope"),
        (admin("p", HASH, ""), "at least one scope"),
        (admin("p", "abc", "\"admin\""), "64 hex characters"),
        (admin("unknown", HASH, "\"admin\""), "needs a name"),
        (
            format!(
                "{}{}",
                admin("p", HASH, "\"admin\""),
                admin("p", OTHER, "\"admin\"")
            ),
            "configured twice",
        ),
        // A tenant's key and an admin key are never the same key.
        (
            format!(
                "{}{}",
                key("shop", HASH, "\"orders:read\""),
                admin("p", HASH, "\"admin\"")
            ),
            "same hash",
        ),
    ] {
        let text = refused(&toml, &[]);
        assert!(text.contains(says), "{toml}: {text}");
    }
}
