//! The mailer's bookkeeping writes failing against the real database, with
//! two mailers each holding a copy of one email's message (as after the
//! relay republished it) and a short lease (`ONCEHOOK_MAIL_LEASE=15s`):
//!
//! * the write that records a failed send (and renews the lease) fails: the
//!   mailer logs it with the outbox id and stops working the row until the
//!   lease has run out and the row is leased afresh, so the email is never
//!   re-sent under a lease another mailer may hold by then;
//! * the mark after a send that succeeded fails for a while: the mailer
//!   keeps the lease and retries the mark, logging the outbox id.
//!
//! Either way: exactly one email over SMTP. The writes are made to fail by
//! a trigger on this test's own database (no other test sees it), on
//! exactly the update that one step makes.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use oncehook_common::Topology;
use oncehook_common::email::EmailMessage;
use oncehook_e2e::{PipelineSpec, Proc, Shop, SmtpSink, TestEnv, WAIT, broker, eventually, shop};
use uuid::Uuid;

const LEASE: &str = "15s";

/// Fails, as a serialization failure would, every update of
/// `email_outbox` that `condition` (over OLD and NEW) picks.
async fn fail_updates_where(env: &TestEnv, condition: &str) {
    let function = format!(
        "CREATE FUNCTION test_refuse_outbox_write() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF {condition} THEN
             RAISE EXCEPTION 'refused by the test' USING ERRCODE = '40001';
           END IF;
           RETURN NEW;
         END $$"
    );
    // The condition is one of this file's literals.
    sqlx::query(sqlx::AssertSqlSafe(function))
        .execute(&env.pool)
        .await
        .expect("create the trigger function");
    sqlx::query(
        "CREATE TRIGGER test_refuse_outbox_write BEFORE UPDATE ON email_outbox
         FOR EACH ROW EXECUTE FUNCTION test_refuse_outbox_write()",
    )
    .execute(&env.pool)
    .await
    .expect("create the trigger");
}

async fn stop_failing(env: &TestEnv) {
    sqlx::query("DROP TRIGGER test_refuse_outbox_write ON email_outbox")
        .execute(&env.pool)
        .await
        .expect("drop the trigger");
}

/// An order paid through the pipeline (no mailer yet): its email written,
/// published once by the relay and once more by hand, so two copies of its
/// message wait in `P.emails`. Returns the outbox id.
async fn one_email_two_copies(env: &mut TestEnv, order_ref: &str, smtp: &SmtpSink) -> Uuid {
    Shop::basket(order_ref).seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().smtp(&smtp.url()).without_mailer())
        .await;
    let pay = format!("pay_{order_ref}");
    let evt = format!("evt_{order_ref}");
    env.post_ok(&app.url, "razorpay", &env.captured(order_ref, &pay, &evt))
        .await;
    shop::wait_paid(&env.pool, order_ref).await;
    let emails = Topology::new(env.prefix.clone()).emails();
    eventually("the email published by the relay", WAIT, || async {
        (broker::depth(&emails).await == Some(1)).then_some(())
    })
    .await;
    let id: Uuid = sqlx::query_scalar("SELECT id FROM email_outbox")
        .fetch_one(&env.pool)
        .await
        .expect("the outbox row");
    let message = EmailMessage { outbox_id: id };
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    ch.basic_publish(
        "".into(),
        emails.as_str().into(),
        BasicPublishOptions::default(),
        &message.to_bytes(),
        message.properties(),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let _ = conn.close(200, "bye".into()).await;
    assert_eq!(broker::depth(&emails).await, Some(2), "two copies");
    drop(app);
    id
}

/// Two mailers holding one message each (prefetch and concurrency 1).
async fn two_mailers(env: &mut TestEnv) -> (Proc, Proc) {
    env.set_env("ONCEHOOK_MAIL_LEASE", LEASE);
    env.set_env("ONCEHOOK_PREFETCH", "1");
    env.set_env("ONCEHOOK_MAIL_CONCURRENCY", "1");
    env.set_env("ONCEHOOK_MAX_ATTEMPTS", "50");
    let a = env.start_mailer().await;
    let b = env.start_mailer().await;
    (a, b)
}

/// The row is sent, both copies settled, and nothing more arrives for a
/// lease and a half: then exactly one email went over SMTP.
async fn assert_sent_once(env: &TestEnv, id: Uuid, smtp: &SmtpSink, mailers: &[&Proc]) {
    eventually("the email marked sent", Duration::from_secs(90), || async {
        let sent: Option<bool> =
            sqlx::query_scalar("SELECT sent_at IS NOT NULL FROM email_outbox WHERE id = $1")
                .bind(id)
                .fetch_optional(&env.pool)
                .await
                .ok()
                .flatten();
        (sent == Some(true)).then_some(())
    })
    .await;
    let emails = Topology::new(env.prefix.clone()).emails();
    eventually("both copies settled", Duration::from_secs(60), || async {
        (broker::depth(&emails).await == Some(0)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(22)).await;
    let logs: Vec<String> = mailers.iter().map(|m| m.log_text()).collect();
    assert_eq!(
        smtp.accepted(),
        1,
        "exactly one email over SMTP; mailer logs:\n{}",
        logs.join("\n----\n")
    );
    assert_eq!(broker::depth(&emails).await, Some(0));
}

#[tokio::test]
async fn a_failed_send_whose_bookkeeping_fails_is_never_resent_under_a_stale_lease() {
    let mut env = TestEnv::new().await;
    let mut smtp = SmtpSink::start().await;
    let id = one_email_two_copies(&mut env, "order_mb1", &smtp).await;
    // SMTP down, and recording a failed send (a new last_error on a row
    // neither sent nor failed) refused.
    smtp.stop();
    fail_updates_where(
        &env,
        "NEW.last_error IS DISTINCT FROM OLD.last_error AND NEW.sent_at IS NULL AND NEW.failed_at IS NULL",
    )
    .await;
    let (a, b) = two_mailers(&mut env).await;

    // The failure is logged with the outbox id.
    let needle = "could not record the failed send";
    eventually("the failed bookkeeping logged", WAIT, || async {
        let logged = [&a, &b].iter().any(|m| {
            let log = m.log_text();
            log.lines()
                .any(|l| l.contains(needle) && l.contains(&id.to_string()))
        });
        logged.then_some(())
    })
    .await;
    // Past the first lease, with the sends still failing: the row changes
    // hands between the mailers, each only under a fresh lease.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(smtp.accepted(), 0);
    smtp.resume().await;

    assert_sent_once(&env, id, &smtp, &[&a, &b]).await;
    stop_failing(&env).await;
}

#[tokio::test]
async fn a_sent_email_whose_mark_fails_for_a_while_is_sent_once() {
    let mut env = TestEnv::new().await;
    let smtp = SmtpSink::start().await;
    let id = one_email_two_copies(&mut env, "order_mb2", &smtp).await;
    // Marking the row sent is refused for a while (shorter than the lease).
    fail_updates_where(&env, "NEW.sent_at IS NOT NULL AND OLD.sent_at IS NULL").await;
    let (a, b) = two_mailers(&mut env).await;

    eventually("the email handed to SMTP", WAIT, || async {
        (smtp.accepted() >= 1).then_some(())
    })
    .await;
    let needle = "email sent but not yet marked";
    eventually("the unwritten mark logged", WAIT, || async {
        let logged = [&a, &b].iter().any(|m| {
            m.log_text()
                .lines()
                .any(|l| l.contains(needle) && l.contains(&id.to_string()))
        });
        logged.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop_failing(&env).await;

    assert_sent_once(&env, id, &smtp, &[&a, &b]).await;
}
