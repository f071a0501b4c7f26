//! The baseline a user would otherwise write: an actix handler that
//! verifies the signature, runs the dedup claim and the effect in one
//! transaction (`deploy/bench/naive-handler.sql`), then sends the
//! confirmation email over SMTP itself and only then answers the gateway.
//! Measured with the same signed deliveries and the same concurrency as
//! ingest, with the SMTP listener answering at once and after 200 ms, and
//! compared with oncehook's acknowledgement (ingest) and its end-to-end
//! rates (worker, mailer).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use oncehook_e2e::{Secrets, SmtpSink, TestEnv};
use oncehook_gateways::sample::SignedDelivery;
use oncehook_gateways::{Credentials, Gateway, Headers};
use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row as _};

use crate::{Knobs, Row, Stats, captured, closed_loop, http_client, post, seed_shop, workspace};

/// Orders per run: every request pays a distinct pending order.
const ORDERS: usize = 20_000;

/// The handler's statements, by their `-- name:` in the SQL file.
struct Statements(HashMap<String, String>);

impl Statements {
    fn load() -> Statements {
        let path = workspace().join("deploy/bench/naive-handler.sql");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut map = HashMap::new();
        let mut name: Option<String> = None;
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("-- name:") {
                name = Some(n.trim().to_owned());
                map.insert(n.trim().to_owned(), String::new());
            } else if let Some(n) = &name
                && !line.starts_with("--")
                && let Some(sql) = map.get_mut(n)
            {
                sql.push_str(line);
                sql.push('\n');
            }
        }
        Statements(map)
    }

    fn get(&self, name: &str) -> sqlx::AssertSqlSafe<String> {
        let sql = self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("no `-- name: {name}` in naive-handler.sql"));
        sqlx::AssertSqlSafe(sql.trim().trim_end_matches(';').to_owned())
    }
}

struct Naive {
    pool: PgPool,
    smtp: AsyncSmtpTransport<Tokio1Executor>,
    secrets: Vec<String>,
    sql: Statements,
}

async fn webhook(req: HttpRequest, body: web::Bytes, state: web::Data<Naive>) -> HttpResponse {
    match apply(&req, &body, &state).await {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({"status": "ok"})),
        Err(e) => HttpResponse::InternalServerError().body(e),
    }
}

async fn apply(req: &HttpRequest, body: &[u8], state: &Naive) -> Result<(), String> {
    let mut headers = Headers::new();
    for (name, value) in req.headers() {
        if let Ok(value) = value.to_str() {
            headers.insert(name.as_str(), value);
        }
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let credentials = Credentials::new(&state.secrets);
    oncehook_gateways::verify(Gateway::Razorpay, credentials, &headers, body, now, 300)
        .map_err(|e| e.to_string())?;
    let event =
        oncehook_gateways::parse(Gateway::Razorpay, &headers, body).map_err(|e| e.to_string())?;
    let order_ref = event.order_ref.clone().ok_or("no order reference")?;
    let payment_id = event.payment_id.clone().ok_or("no payment id")?;
    let db = |e: sqlx::Error| e.to_string();

    let mut tx = state.pool.begin().await.map_err(db)?;
    let claimed = sqlx::query(state.sql.get("claim"))
        .bind("razorpay")
        .bind(&event.event_id)
        .bind(hex::encode(Sha256::digest(body)))
        .bind("razorpay")
        .bind(&event.event_type)
        .bind(&order_ref)
        .bind(&payment_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
    if claimed.is_none() {
        tx.commit().await.map_err(db)?;
        return Ok(());
    }
    let order = sqlx::query(state.sql.get("lock_order"))
        .bind(&order_ref)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
    let order_id: i64 = order.try_get(0).map_err(db)?;
    let email: String = order.try_get(1).map_err(db)?;
    sqlx::query(state.sql.get("record_payment"))
        .bind("razorpay")
        .bind(&payment_id)
        .bind(order_id)
        .bind(event.amount_minor.unwrap_or(0))
        .bind(event.currency.clone().unwrap_or_default())
        .bind(&event.event_id)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    sqlx::query(state.sql.get("take_stock"))
        .bind(order_id)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    sqlx::query(state.sql.get("mark_paid"))
        .bind(order_id)
        .bind(format!("razorpay:{payment_id}"))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    tx.commit().await.map_err(db)?;

    let message = Message::builder()
        .from(
            "shop <orders@example.com>"
                .parse()
                .map_err(|e| format!("{e}"))?,
        )
        .to(email.parse().map_err(|e| format!("{e}"))?)
        .subject(format!("Order {order_ref} confirmed"))
        .header(ContentType::TEXT_PLAIN)
        .body(format!("Thank you for your order {order_ref}.\n"))
        .map_err(|e| e.to_string())?;
    state.smtp.send(message).await.map_err(|e| e.to_string())?;
    Ok(())
}

pub struct NaiveRun {
    pub answer: Duration,
    pub stats: Stats,
    pub paid: i64,
    pub emails: usize,
}

pub async fn naive_phase(knobs: &Knobs) -> Vec<NaiveRun> {
    let env = TestEnv::new().await;
    seed_shop(&env, true, 1, 2 * ORDERS as i64).await;
    let sql = Statements::load();
    let mut runs = Vec::new();
    let mut sql = Some(sql);
    for (round, answer) in [Duration::ZERO, Duration::from_millis(200)]
        .into_iter()
        .enumerate()
    {
        let sink = SmtpSink::start_with_delay(answer).await;
        let smtp = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(sink.port)
            .timeout(Some(Duration::from_secs(10)))
            .build();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(u32::try_from(knobs.concurrency).unwrap_or(16))
            .connect(&env.database_url)
            .await
            .expect("connect the naive handler's pool");
        let state = web::Data::new(Naive {
            pool: pool.clone(),
            smtp,
            secrets: vec![Secrets::RAZORPAY.to_owned()],
            sql: sql.take().unwrap_or_else(Statements::load),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the naive handler");
        let addr = listener.local_addr().expect("its address");
        let app_state = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(app_state.clone())
                .route("/webhooks/razorpay", web::post().to(webhook))
        })
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        let running = tokio::spawn(server);

        eprintln!(
            "bench: naive handler, SMTP answering after {} ms, c={}",
            answer.as_millis(),
            knobs.concurrency
        );
        let first = round * ORDERS + 1;
        let deliveries: Arc<Vec<SignedDelivery>> = Arc::new(
            (first..first + ORDERS)
                .map(|n| captured(&env, n, &format!("n{round}")))
                .collect(),
        );
        let http = http_client(knobs.concurrency);
        let url = Arc::new(format!("http://{addr}/webhooks/razorpay"));
        let stats = closed_loop(
            knobs.concurrency,
            Duration::from_secs(1),
            knobs.duration(),
            ORDERS / knobs.concurrency,
            move |i| {
                let (http, url, deliveries) = (http.clone(), url.clone(), deliveries.clone());
                async move { post(&http, &url, &deliveries[i % deliveries.len()]).await }
            },
        )
        .await;
        handle.stop(true).await;
        let _ = running.await;
        let paid: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM orders WHERE status = 'paid' AND order_ref = ANY($1)",
        )
        .bind(
            (first..first + ORDERS)
                .map(|n| format!("bench_{n}"))
                .collect::<Vec<_>>(),
        )
        .fetch_one(&env.pool)
        .await
        .unwrap_or(-1);
        pool.close().await;
        runs.push(NaiveRun {
            answer,
            stats,
            paid,
            emails: sink.accepted(),
        });
    }
    runs
}

/// What oncehook does in the same run, for the comparison.
pub struct Oncehook<'a> {
    /// Ingest's acknowledgements (signed POSTs, same concurrency).
    pub ack: Option<&'a Stats>,
    /// Events applied per second by one worker, and emails sent per second
    /// by the mailer, with the SMTP answer delay each was measured with.
    pub applied: Option<f64>,
    pub mailed: Vec<(Duration, f64)>,
}

pub fn report(
    runs: &[NaiveRun],
    ours: &Oncehook<'_>,
    knobs: &Knobs,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    let c = knobs.concurrency;
    for run in runs {
        let ms = run.answer.as_millis();
        let mut vs = Vec::new();
        if let Some(ack) = ours.ack {
            vs.push(format!(
                "vs oncehook's ack (ingest): {} throughput, p99 {}",
                crate::ratio(run.stats.rate(), ack.rate()),
                crate::lat_ratio(run.stats.p99(), ack.p99())
            ));
        }
        let mailed = ours
            .mailed
            .iter()
            .find(|(answer, _)| *answer == run.answer)
            .map(|(_, rate)| *rate);
        if let (Some(applied), Some(mailed)) = (ours.applied, mailed) {
            let end_to_end = applied.min(mailed);
            vs.push(format!(
                "vs oncehook end to end (min of worker {applied:.0}/s and mailer {mailed:.0}/s): {}",
                crate::ratio(run.stats.rate(), end_to_end)
            ));
        }
        rows.push(Row::new(
            format!("naive actix handler (verify, SQL, SMTP inline), SMTP {ms} ms, c={c}"),
            "req/s",
            &run.stats,
            vs.join("; "),
        ));
        notes.push(format!(
            "naive handler, SMTP {ms} ms: {} requests answered 200, {} orders paid, {} emails accepted, {} failed requests",
            run.stats.ok, run.paid, run.emails, run.stats.errors
        ));
    }
    notes.push(
        "the naive handler commits, then sends the email inline on a new SMTP connection (lettre's \
         transport without a pool), then answers; its latency is the gateway's wait. oncehook answers \
         after the broker's confirm and applies and mails asynchronously"
            .to_owned(),
    );
}
