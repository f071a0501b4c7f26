use super::*;
use crate::config::testing::{File, load, load_env, refused, refused_env};

#[test]
fn defaults_write_files() {
    let c = load_env(&[]).expect("defaults").mail;
    assert!(c.smtp.is_none());
    assert_eq!(c.from, "oncehook <orders@oncehook.local>");
    assert_eq!(c.dir, PathBuf::from("./var/mail"));
    assert_eq!(c.retry.max_attempts, Some(5));
}

#[test]
fn the_mail_concurrency_is_its_own_setting() {
    let c = load_env(&[]).expect("defaults");
    assert_eq!((c.mail.prefetch, c.mail.concurrency), (16, 32));
    let mut file = File::new("[mail]\nconcurrency = 8\n");
    let c = file.load().expect("from the file");
    assert_eq!((c.mail.prefetch, c.mail.concurrency), (16, 8));
    let c = file
        .set(ENV_MAIL_CONCURRENCY, "64")
        .load()
        .expect("env wins");
    assert_eq!(c.mail.concurrency, 64);
    assert_eq!(c.worker.prefetch, 16, "the worker is not touched");
    let text = file
        .set(ENV_MAIL_CONCURRENCY, "0")
        .load()
        .expect_err("zero")
        .to_string();
    assert!(text.contains(ENV_MAIL_CONCURRENCY), "{text}");
}

#[test]
fn one_variable_sets_the_prefetch_and_attempts_of_worker_and_mailer() {
    let c = load_env(&[(ENV_PREFETCH, "4"), (ENV_MAX_ATTEMPTS, "9")]).expect("shared");
    assert_eq!((c.worker.prefetch, c.mail.prefetch), (4, 4));
    assert_eq!(
        (c.worker.retry.max_attempts, c.mail.retry.max_attempts),
        (Some(9), Some(9))
    );
    let c = load("[mail]\nretry = { max_attempts = 2 }\n", &[]).expect("mail only");
    assert_eq!(
        (c.worker.retry.max_attempts, c.mail.retry.max_attempts),
        (Some(5), Some(2))
    );
}

#[test]
fn the_smtp_settings_reach_their_checks() {
    let c = load_env(&[
        (ENV_SMTP_URL, "smtp://smtp.example.com:587"),
        (ENV_SMTP_TLS, "starttls"),
        (ENV_SMTP_USERNAME, "apikey"),
        (ENV_SMTP_PASSWORD, "TOPSECRET"),
    ])
    .expect("hosted provider");
    let smtp = c.mail.smtp.as_ref().expect("smtp");
    assert_eq!(smtp.address(), "smtp.example.com:587");
    let login = smtp.credentials.as_ref().expect("login");
    assert_eq!(login.password.expose(), "TOPSECRET");
    assert!(!format!("{c:?}").contains("TOPSECRET"));

    let text = refused_env(&[(ENV_SMTP_URL, "smtp://mailer:TOPSECRET@relay.example.com")]);
    assert!(
        text.contains("plain connection") && !text.contains("TOPSECRET"),
        "{text}"
    );
}

#[test]
fn allow_insecure_auth_takes_a_toml_boolean_or_text() {
    let plain = "smtp://mailer:pw@127.0.0.1:25";
    let c = load(
        "[mail]\nallow_insecure_auth = true\n",
        &[(ENV_SMTP_URL, plain)],
    )
    .expect("bool");
    assert!(c.mail.smtp.expect("smtp").credentials.is_some());
    for text in ["yes", "true", "on", "1"] {
        let c = load_env(&[(ENV_SMTP_URL, plain), (ENV_SMTP_ALLOW_INSECURE_AUTH, text)]);
        assert!(c.is_ok(), "{text}: {:?}", c.err());
    }
    let text = refused(
        "[mail]\nallow_insecure_auth = \"maybe\"\n",
        &[(ENV_SMTP_URL, plain)],
    );
    assert!(
        text.contains("mail.allow_insecure_auth") && text.contains(ENV_SMTP_ALLOW_INSECURE_AUTH),
        "{text}"
    );
}

#[test]
fn an_empty_ca_file_is_unset_and_a_blank_sender_is_refused() {
    let c = load("[mail]\nca_file = \"\"\n", &[]).expect("empty ca_file");
    assert!(c.mail.smtp.is_none());
    let text = refused("[mail]\nfrom = \"\"\n", &[]);
    assert!(
        text.contains("mail.from") && text.contains(ENV_MAIL_FROM),
        "{text}"
    );
}

#[test]
fn a_password_of_the_wrong_type_is_not_echoed() {
    let text = refused("[mail]\npassword = [\"TYPEDSECRET789\"]\n", &[]);
    assert!(
        text.contains("mail.password") && text.contains("invalid type: expected"),
        "{text}"
    );
    assert!(!text.contains("TYPEDSECRET789"), "{text}");
}
