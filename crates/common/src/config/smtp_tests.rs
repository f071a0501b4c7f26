use super::*;

fn raw(url: &str) -> RawSmtp {
    RawSmtp {
        url: Some(url.to_owned()),
        tls: None,
        username: None,
        password: None,
        ca_file: None,
        allow_insecure_auth: false,
    }
}

fn ok(raw: RawSmtp) -> SmtpConfig {
    smtp(raw).expect("valid").expect("configured")
}

fn err(raw: RawSmtp) -> String {
    smtp(raw).expect_err("refused").to_string()
}

#[test]
fn no_url_means_files() {
    assert!(
        smtp(RawSmtp {
            url: None,
            ..raw("")
        })
        .expect("valid")
        .is_none()
    );
    assert!(smtp(raw("  ")).expect("valid").is_none());
}

#[test]
fn modes_and_default_ports() {
    let plain = ok(raw("smtp://relay.local"));
    assert_eq!((plain.tls, plain.port), (SmtpTls::None, 25));
    let implicit = ok(raw("smtps://smtp.example.com"));
    assert_eq!((implicit.tls, implicit.port), (SmtpTls::Implicit, 465));
    let query = ok(raw("smtp://smtp.example.com?tls=starttls"));
    assert_eq!((query.tls, query.port), (SmtpTls::StartTls, 587));
    let setting = ok(RawSmtp {
        tls: Some("STARTTLS".into()),
        ..raw("smtp://smtp.example.com:2587")
    });
    assert_eq!((setting.tls, setting.port), (SmtpTls::StartTls, 2587));
    assert_eq!(setting.address(), "smtp.example.com:2587");
}

#[test]
fn modes_that_disagree_are_refused() {
    let e = err(RawSmtp {
        tls: Some("none".into()),
        ..raw("smtp://h?tls=starttls")
    });
    assert!(e.contains("one place"), "{e}");
    let e = err(RawSmtp {
        tls: Some("starttls".into()),
        ..raw("smtps://h")
    });
    assert!(e.contains("smtps://"), "{e}");
    let e = err(raw("smtp://h?tls=maybe"));
    assert!(e.contains("not a TLS mode"), "{e}");
    let e = err(raw("smtp://h?tsl=starttls"));
    assert!(e.contains("unknown parameter"), "{e}");
    let e = err(raw("http://h"));
    assert!(e.contains("smtp:// or smtps://"), "{e}");
}

#[test]
fn credentials_from_the_url_are_decoded_and_kept_secret() {
    let c = ok(raw("smtps://apikey:p%40ss%3Aw0rd@smtp.example.com"));
    let login = c.credentials.expect("login");
    assert_eq!(login.username, "apikey");
    assert_eq!(login.password.expose(), "p@ss:w0rd");
    assert!(
        !c.shown.contains("p%40ss") && c.shown.contains("***"),
        "{}",
        c.shown
    );
    assert!(!format!("{login:?}").contains("w0rd"));
}

#[test]
fn a_login_in_the_url_must_decode_to_utf8() {
    let e = err(raw("smtps://apikey:p%FFss@smtp.example.com"));
    assert!(e.contains("not valid percent-encoded UTF-8"), "{e}");
    assert!(!e.contains("p%FFss"), "{e}");
    // A `%` without two hex digits after it is taken as written.
    let c = ok(raw("smtps://apikey:100%zz@smtp.example.com"));
    assert_eq!(c.credentials.expect("login").password.expose(), "100%zz");
}

#[test]
fn credentials_from_the_settings() {
    let c = ok(RawSmtp {
        tls: Some("starttls".into()),
        username: Some("AKIA123".into()),
        password: Some("s3cr3t".into()),
        ..raw("smtp://email-smtp.eu-west-1.amazonaws.com:587")
    });
    let login = c.credentials.expect("login");
    assert_eq!(
        (login.username.as_str(), login.password.expose()),
        ("AKIA123", "s3cr3t")
    );
}

#[test]
fn a_login_in_two_places_or_half_a_login_is_refused() {
    let e = err(RawSmtp {
        password: Some("other".into()),
        ..raw("smtps://u:pw@h")
    });
    assert!(
        e.contains("one place") && !e.contains("pw@") && !e.contains("other"),
        "{e}"
    );
    let e = err(raw("smtps://user@h"));
    assert!(e.contains("no password"), "{e}");
    let e = err(RawSmtp {
        password: Some("lonely".into()),
        ..raw("smtps://h")
    });
    assert!(
        e.contains("without a user name") && !e.contains("lonely"),
        "{e}"
    );
}

#[test]
fn a_password_over_a_plain_connection_is_refused_unless_allowed() {
    let e = err(raw("smtp://mailer:TOPSECRET@relay.example.com"));
    assert!(
        e.contains("plain connection") && !e.contains("TOPSECRET"),
        "{e}"
    );
    let c = ok(RawSmtp {
        allow_insecure_auth: true,
        ..raw("smtp://mailer:TOPSECRET@127.0.0.1:25")
    });
    assert!(c.credentials.is_some());
}

#[test]
fn no_error_quotes_the_password() {
    for url in [
        "smtps://mailer:TOPSECRET@host:99999",
        "smtps://mailer:TOPSECRET@host:port",
        "ftp://mailer:TOPSECRET@host",
        "smtps://mailer:TOPSECRET@",
        "smtp://mailer:TOPSECRET@host?tls=bogus",
        "smtp://mailer:TOPSECRET@host",
    ] {
        let e = err(raw(url));
        assert!(!e.contains("TOPSECRET"), "{url}: {e}");
        assert!(e.contains("ONCEHOOK_SMTP"), "{url}: {e}");
    }
}

#[test]
fn a_ca_file_needs_tls() {
    let e = err(RawSmtp {
        ca_file: Some("/etc/relay-ca.pem".into()),
        ..raw("smtp://relay")
    });
    assert!(e.contains("no TLS"), "{e}");
    let c = ok(RawSmtp {
        ca_file: Some("/etc/relay-ca.pem".into()),
        ..raw("smtps://relay")
    });
    assert!(c.ca_file.is_some());
}
