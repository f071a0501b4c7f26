use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";

fn user(name: &str, role: &str, hash: &str) -> String {
    format!("[[console.user]]\nname = \"{name}\"\nrole = \"{role}\"\npassword_hash = \"{hash}\"\n")
}

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").console;
    assert_eq!(c.addr, "127.0.0.1:8081".parse().expect("addr"));
    assert!(c.session_key.is_none() && c.users.is_empty());
    assert_eq!(c.session_ttl, Duration::from_secs(8 * 3_600));
    assert!(c.secure_cookies);
}

#[test]
fn users_are_read_from_the_file_and_checked() {
    let toml = format!(
        "{}{}",
        user("ops", "operator", HASH),
        user("eve", "viewer", HASH)
    );
    let c = load(&toml, &[]).expect("two users").console;
    let users: Vec<(&str, ConsoleRole)> =
        c.users.iter().map(|u| (u.name.as_str(), u.role)).collect();
    assert_eq!(
        users,
        [("ops", ConsoleRole::Operator), ("eve", ConsoleRole::Viewer)]
    );
    assert_eq!(c.users[0].password_hash.expose(), HASH);

    let twice = format!(
        "{}{}",
        user("ops", "operator", HASH),
        user("ops", "viewer", HASH)
    );
    assert!(refused(&twice, &[]).contains("configured twice"));
    assert!(refused(&user("ops", "admin", HASH), &[]).contains("`viewer` or `operator`"));
    assert!(refused(&user(" ", "viewer", HASH), &[]).contains("needs a name"));
    let text = refused(&user("ops", "viewer", "plain-PASSWORD"), &[]);
    assert!(
        text.contains("argon2") && !text.contains("plain-PASSWORD"),
        "{text}"
    );
    let text = refused("[[console.user]]\nname = \"ops\"\nrole = \"viewer\"\n", &[]);
    assert!(text.contains("password_hash"), "{text}");
}

#[test]
fn the_session_key_is_long_and_never_printed() {
    let key = "k".repeat(32);
    let c = load_env(&[(ENV_CONSOLE_SESSION_KEY, &key)]).expect("32 characters");
    assert_eq!(
        c.console.session_key.as_ref().map(Secret::expose),
        Some(key.as_str())
    );
    assert!(!format!("{c:?}").contains(&key));
    let text = refused_env(&[(ENV_CONSOLE_SESSION_KEY, "SHORTSECRET")]);
    assert!(
        text.contains(ENV_CONSOLE_SESSION_KEY) && text.contains("32"),
        "{text}"
    );
    assert!(!text.contains("SHORTSECRET"), "{text}");
    let c = load("[console]\nsession_key = \"\"\n", &[]).expect("empty is unset");
    assert!(c.console.session_key.is_none());
    let text = refused(
        "[console]\nsession_key = [\"TYPEDSECRET456-long-enough-for-a-session-key\"]\n",
        &[],
    );
    assert!(
        text.contains("console.session_key") && text.contains("found a list"),
        "{text}"
    );
    assert!(!text.contains("TYPEDSECRET456"), "{text}");
}

#[test]
fn secure_cookies_takes_a_toml_boolean_or_text() {
    for (toml, vars, secure) in [
        ("[console]\nsecure_cookies = false\n", &[][..], false),
        ("[console]\nsecure_cookies = \"no\"\n", &[][..], false),
        ("", &[(ENV_CONSOLE_SECURE_COOKIES, "false")][..], false),
        (
            "[console]\nsecure_cookies = false\n",
            &[(ENV_CONSOLE_SECURE_COOKIES, "TRUE")][..],
            true,
        ),
    ] {
        let c = load(toml, vars).expect(toml);
        assert_eq!(c.console.secure_cookies, secure, "{toml} {vars:?}");
    }
    let text = refused_env(&[(ENV_CONSOLE_SECURE_COOKIES, "sometimes")]);
    assert!(text.contains(ENV_CONSOLE_SECURE_COOKIES), "{text}");
}

#[test]
fn the_session_ttl_is_a_duration() {
    let c = load_env(&[
        (ENV_CONSOLE_SESSION_TTL, "30m"),
        (ENV_CONSOLE_ADDR, "0.0.0.0:9000"),
    ])
    .expect("set");
    assert_eq!(c.console.session_ttl, Duration::from_secs(1_800));
    assert_eq!(c.console.addr.port(), 9000);
    let text = refused_env(&[(ENV_CONSOLE_SESSION_TTL, "forever")]);
    assert!(text.contains(ENV_CONSOLE_SESSION_TTL), "{text}");
}

#[test]
fn roles_read_and_print_the_same_words() {
    for role in [ConsoleRole::Viewer, ConsoleRole::Operator] {
        assert_eq!(ConsoleRole::parse(role.as_str()), Some(role));
    }
    assert!(ConsoleRole::Viewer < ConsoleRole::Operator);
}
