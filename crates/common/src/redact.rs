//! URLs fit for logs and error messages: the password (and a `password`
//! query parameter) replaced by `***`. Never prints any part of a password,
//! including passwords that contain `@`, `:` or `/`.

/// `url` with its password removed; the user name, host, port, path and
/// other query parameters are kept.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                // Cannot fail: a URL with a password has a host.
                let _ = parsed.set_password(Some("***"));
            }
            if parsed.query_pairs().any(|(k, _)| is_secret(&k)) {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if is_secret(&k) { "***".into() } else { v };
                        (k.into_owned(), v.into_owned())
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        Err(_) => redact_unparsed(url),
    }
}

fn is_secret(key: &str) -> bool {
    key.eq_ignore_ascii_case("password")
}

/// For text the `url` crate refuses: everything between the user name and
/// the LAST `@` is the password (over-redacting is safe, leaking is not).
/// The query and fragment are dropped, since they cannot be parsed safely.
fn redact_unparsed(text: &str) -> String {
    let body_start = text.find("://").map_or(0, |i| i + 3);
    let (scheme, rest) = text.split_at(body_start);
    let Some(at) = rest.rfind('@') else {
        return text.split(['?', '#']).next().unwrap_or_default().to_owned();
    };
    let (creds, host) = (&rest[..at], &rest[at + 1..]);
    let host = host.split(['?', '#']).next().unwrap_or_default();
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}{user}:***@{host}"),
        None => format!("{scheme}{creds}@{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn removes_the_password_and_keeps_the_rest() {
        assert_eq!(
            redact("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5432/oncehook"),
            "postgres://postgres@127.0.0.1:5432/oncehook"
        );
        assert_eq!(
            redact("postgres://127.0.0.1/db?user=app&password=hunter2"),
            "postgres://127.0.0.1/db?user=app&password=***"
        );
    }

    #[test]
    fn a_password_with_at_signs_colons_or_slashes_never_shows() {
        for (url, password_parts) in [
            ("amqp://user:p@ss@host/", &["p@ss", "p%40ss", "ss@"][..]),
            (
                "amqp://user:s3:cr@t@host:5672/%2f",
                &["s3", "cr@t", "cr%40t"],
            ),
            ("postgres://app:pa/ss@db/oncehook", &["pa/ss", "pa%2Fss"]),
            ("postgres://app:p@ss word@db/x", &["p@ss", "word"]),
            ("not a url user:top@secret@host", &["top", "secret@"]),
        ] {
            let shown = redact(url);
            for part in password_parts {
                assert!(!shown.contains(part), "{url} -> {shown} shows {part:?}");
            }
            assert!(shown.contains("***"), "{url} -> {shown}");
        }
        assert_eq!(redact("amqp://user:p@ss@host/"), "amqp://user:***@host/");
    }
}
