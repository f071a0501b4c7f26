//! `oncehookctl dlq show <ID>`: everything about one dead letter — headers,
//! error, envelope and the gateway's payload (JSON pretty-printed, PayU
//! forms decoded). What it prints is masked as the console masks it
//! ([`super::mask`]: signature headers, hashes and other secret fields)
//! unless `--reveal` asks for everything ([`ShowReport::masked`]).

use std::fmt;

use anyhow::bail;
use base64::Engine as _;
use lapin::Connection;
use oncehook_common::Topology;
use serde::Serialize;
use serde_json::{Map, Value};

use super::letter::{Letter, LetterSummary};
use super::mask;
use crate::broker;
use crate::output::{Report, or_dash};
use crate::timefmt::rfc3339;

/// One dead letter in full (`--json`: the summary fields plus these).
#[derive(Serialize)]
pub struct ShowReport {
    #[serde(flatten)]
    pub summary: LetterSummary,
    /// Identical copies in the queue.
    pub copies: usize,
    pub envelope: Option<EnvelopeView>,
    pub email: Option<EmailView>,
    /// The payload as JSON, a decoded form as an object, else null.
    pub payload: Value,
    /// The payload as received; masked: the masked JSON, or the form with
    /// its secret fields masked.
    pub payload_raw: Option<String>,
    /// The whole message, base64; masked: null (it holds every secret).
    pub message_body_b64: Option<String>,
    #[serde(skip)]
    letter: Letter,
    #[serde(skip)]
    queue: String,
    #[serde(skip)]
    payload_bytes: Option<Vec<u8>>,
    #[serde(skip)]
    form: Option<Vec<(String, String)>>,
    #[serde(skip)]
    payload_is_json: bool,
    /// Whether secrets are masked ([`ShowReport::masked`]).
    #[serde(skip)]
    masked: bool,
}

/// The envelope ingest wrapped the delivery in (without its body).
#[derive(Serialize)]
pub struct EnvelopeView {
    pub version: u32,
    pub receipt_id: String,
    pub source: String,
    pub gateway: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: Option<String>,
    pub verified_at: Option<String>,
    pub signed_at: Option<i64>,
    pub headers: Map<String, Value>,
    /// The tenant of the source it came through (docs/tenants.md).
    pub tenant: String,
}

/// An email dead letter: the outbox row it sends.
#[derive(Serialize)]
pub struct EmailView {
    pub outbox_id: String,
}

pub async fn run(conn: &Connection, topology: &Topology, id: &str) -> anyhow::Result<ShowReport> {
    let wanted = id.trim().to_ascii_lowercase();
    let (letters, _) = broker::peek(conn, topology, |l| l.facts.id == wanted)
        .await?
        .release(conn, 0)
        .await;
    let copies = letters.iter().filter(|l| l.facts.id == wanted).count();
    let Some(letter) = letters.into_iter().find(|l| l.facts.id == wanted) else {
        bail!(
            "no dead letter with ID {id:?} in {} (IDs come from `oncehookctl dlq list`)",
            topology.dead()
        );
    };
    Ok(ShowReport::new(letter, copies, topology.dead()))
}

impl ShowReport {
    /// The report of `letter` (read with its body), which the queue holds
    /// `copies` times.
    pub fn new(letter: Letter, copies: usize, queue: String) -> ShowReport {
        let payload_bytes = letter.envelope.as_ref().and_then(|e| e.body().ok());
        let payload_json = payload_bytes
            .as_deref()
            .and_then(|p| serde_json::from_slice::<Value>(p).ok());
        let form = match (&payload_bytes, &payload_json) {
            (Some(p), None) if looks_like_form(&letter) => decode_form(p),
            _ => None,
        };
        let payload_is_json = payload_json.is_some();
        let payload = match (payload_json, &form) {
            (Some(j), _) => j,
            (None, Some(pairs)) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
            _ => Value::Null,
        };
        ShowReport {
            summary: letter.summary(),
            copies,
            envelope: letter.envelope.as_ref().map(EnvelopeView::of),
            email: letter.email.as_ref().map(|m| EmailView {
                outbox_id: m.outbox_id.to_string(),
            }),
            payload,
            payload_raw: payload_bytes
                .as_deref()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            message_body_b64: Some(base64::engine::general_purpose::STANDARD.encode(&letter.body)),
            letter,
            queue,
            payload_bytes,
            form,
            payload_is_json,
            masked: false,
        }
    }

    /// The report with every secret masked by the console's rules
    /// ([`mask`]): signature and credential headers (the letter's and the
    /// gateway request's), secret payload fields (JSON at any depth, form
    /// fields such as PayU's `hash`) in the payload and its raw text; the
    /// whole message body (`message_body_b64`) is left out.
    #[must_use]
    pub fn masked(mut self) -> ShowReport {
        self.summary.headers = mask::header_map(&self.summary.headers);
        if let Some(env) = &mut self.envelope {
            env.headers = mask::header_map(&env.headers);
        }
        self.payload = mask::json(&self.payload);
        self.form = self.form.map(|pairs| mask::form(&pairs));
        self.payload_raw = match (&self.payload_raw, self.payload_is_json, &self.form) {
            (None, ..) => None,
            (Some(_), true, _) => Some(self.payload.to_string()),
            (Some(raw), false, Some(_)) => Some(masked_form_text(raw)),
            (Some(raw), false, None) => Some(raw.clone()),
        };
        self.message_body_b64 = None;
        self.masked = true;
        self
    }

    /// The labelled fields at the top of the text.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let (l, s) = (&self.letter, &self.summary);
        let mut fields = vec![
            ("gateway", l.facts.gateway.clone()),
            ("source", or_dash(l.facts.source.as_ref())),
            ("event", or_dash(l.facts.event_id.as_ref())),
            ("type", or_dash(l.facts.event_type.as_ref())),
            ("kind", l.facts.kind.to_string()),
            ("error", l.facts.error.clone()),
            ("failed at", or_dash(s.failed_at.as_ref())),
            ("attempts", or_dash(l.facts.attempts)),
            ("dead-lettered by", l.facts.dead_lettered_by.to_owned()),
            ("origin", or_dash(l.facts.origin.as_ref())),
            ("routing key", or_dash(l.facts.routing_key.as_ref())),
            ("message id", or_dash(s.message_id.as_ref())),
            ("receipt", or_dash(s.receipt_id.as_ref())),
            ("replays", l.facts.replays.to_string()),
            ("trace", or_dash(l.facts.trace_id.as_ref())),
        ];
        if let Some(first) = &l.facts.first_trace_id {
            fields.push(("first trace", first.clone()));
        }
        if let Some(env) = &l.envelope {
            let t = |t| rfc3339(t).unwrap_or_default();
            fields.push(("received at", t(env.received_at)));
            fields.push(("verified at", t(env.verified_at)));
            if let Some(s) = env.signed_at {
                fields.push(("signed at", s.to_string()));
            }
        }
        if let Some(m) = &l.email {
            fields.push(("outbox id", m.outbox_id.to_string()));
        }
        fields
    }

    fn fmt_payload(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(raw) = &self.payload_bytes else {
            let body = &self.letter.body;
            writeln!(f, "\nMessage body ({} bytes):", body.len())?;
            return match serde_json::from_slice::<Value>(body) {
                Ok(j) if self.masked => write!(f, "{}", pretty(&mask::json(&j))),
                Ok(j) => write!(f, "{}", pretty(&j)),
                Err(_) => write!(f, "{}", String::from_utf8_lossy(body).trim_end()),
            };
        };
        let raw_text = self.payload_raw.as_deref().unwrap_or_default();
        if self.payload_is_json {
            let pretty = pretty(&self.payload);
            return write!(f, "\nPayload (JSON, {} bytes):\n{pretty}", raw.len());
        }
        match &self.form {
            Some(pairs) => {
                writeln!(f, "\nPayload (form, {} bytes), decoded:", raw.len())?;
                for (k, v) in pairs {
                    writeln!(f, "  {k}={v}")?;
                }
                write!(f, "Raw:\n{}", raw_text.trim_end())
            }
            None => write!(
                f,
                "\nPayload (text, {} bytes):\n{}",
                raw.len(),
                raw_text.trim_end()
            ),
        }
    }
}

impl EnvelopeView {
    fn of(env: &oncehook_common::Envelope) -> EnvelopeView {
        EnvelopeView {
            version: env.version,
            receipt_id: env.receipt_id.to_string(),
            source: env.source.clone(),
            gateway: env.gateway.to_string(),
            event_id: env.event_id.clone(),
            event_type: env.event_type.clone(),
            received_at: rfc3339(env.received_at),
            verified_at: rfc3339(env.verified_at),
            signed_at: env.signed_at,
            tenant: env.tenant.to_string(),
            headers: env
                .headers
                .iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect(),
        }
    }
}

impl fmt::Display for ShowReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dead letter {} in {}", self.summary.facts.id, self.queue)?;
        if self.copies > 1 {
            write!(f, " ({} identical copies)", self.copies)?;
        }
        writeln!(f)?;
        for (k, v) in self.fields() {
            writeln!(f, "  {k:<17} {v}")?;
        }
        writeln!(f, "\nHeaders:")?;
        for (k, v) in &self.summary.headers {
            writeln!(f, "  {k}: {}", header_text(v))?;
        }
        if let Some(env) = &self.envelope {
            writeln!(f, "\nGateway request headers:")?;
            for (k, v) in &env.headers {
                writeln!(f, "  {k}: {}", header_text(v))?;
            }
        }
        self.fmt_payload(f)?;
        if self.masked {
            write!(
                f,
                "\n\nSignatures, hashes, tokens and other secrets are masked (`--reveal` shows them)."
            )?;
        }
        Ok(())
    }
}

impl Report for ShowReport {}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A header value for humans: strings bare, everything else as compact JSON.
fn header_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether the letter's payload is a form: its gateway posts forms (the
/// gateways crate says which), or its delivery said so.
fn looks_like_form(letter: &Letter) -> bool {
    letter.envelope.as_ref().is_some_and(|e| {
        e.gateway.posts_forms()
            || e.headers
                .get("content-type")
                .is_some_and(|ct| ct.contains("x-www-form-urlencoded"))
    })
}

/// A form body as written, with the value of each secret field (by its
/// decoded name, [`mask::field_value`]) replaced by the mask's marker.
fn masked_form_text(raw: &str) -> String {
    raw.trim()
        .split('&')
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let name = oncehook_gateways::percent_decode(k).unwrap_or_else(|| k.to_owned());
            let value = oncehook_gateways::percent_decode(v).unwrap_or_else(|| v.to_owned());
            let shown = mask::field_value(&name, &value);
            if shown == value {
                pair.to_owned()
            } else {
                format!("{k}={shown}")
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes an `application/x-www-form-urlencoded` body into pairs, the way
/// PayU verification decodes it; `None` if it does not look like one.
fn decode_form(raw: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(raw).ok()?.trim();
    if text.is_empty() || text.contains(char::is_whitespace) || !text.contains('=') {
        return None;
    }
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((
                oncehook_gateways::percent_decode(k)?,
                oncehook_gateways::percent_decode(v)?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_decode() {
        let pairs = decode_form(b"txnid=order_1&status=failure&field9=Transaction+declined%21")
            .expect("form");
        assert_eq!(pairs[0], ("txnid".into(), "order_1".into()));
        assert_eq!(pairs[2], ("field9".into(), "Transaction declined!".into()));
        assert!(decode_form(b"{\"a\": 1}").is_none());
        // Not UTF-8 once decoded: not a form PayU verification would accept.
        assert!(decode_form(b"a=%ff").is_none());
    }

    #[test]
    fn a_masked_form_text_hides_the_hash_and_keeps_the_rest() {
        let shown = masked_form_text("txnid=t1&hash=abc%2Fdef&status=failure&HASH=x");
        assert_eq!(
            shown,
            format!(
                "txnid=t1&hash={}&status=failure&HASH={}",
                mask::marker(7),
                mask::marker(1)
            )
        );
    }
}
