//! Every API write in `api_audit`: an accepted one in its own transaction
//! (with the key's name, the action, the order or sku, and the result), a
//! refused one afterwards, with its error code. Shown by `oncehookctl trace
//! order` and the console's trace page.

use crate::store::{self, NewApiAudit};
use actix_web::HttpResponse;
use sqlx::PgConnection;

use oncehook_common::store::scope::Scope;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::State;

/// The write being made.
pub struct Write {
    pub key_name: String,
    pub action: &'static str,
    pub order_ref: Option<String>,
    pub sku: Option<String>,
    /// The caller's tenant's scope: the write and its audit run in it.
    pub scope: Scope,
}

impl Write {
    pub fn product(caller: &Caller, action: &'static str, sku: &str) -> Write {
        Write {
            key_name: caller.name.clone(),
            action,
            order_ref: None,
            sku: Some(truncate(sku)),
            scope: caller.scope(),
        }
    }

    pub fn order(caller: &Caller, action: &'static str, order_ref: &str) -> Write {
        Write {
            key_name: caller.name.clone(),
            action,
            order_ref: Some(truncate(order_ref)),
            sku: None,
            scope: caller.scope(),
        }
    }

    fn entry<'a>(&'a self, ok: bool, result: &'a str) -> NewApiAudit<'a> {
        NewApiAudit {
            key_name: &self.key_name,
            action: self.action,
            order_ref: self.order_ref.as_deref(),
            sku: self.sku.as_deref(),
            ok,
            result,
        }
    }
}

/// What a caller sent is kept to 200 characters in the audit.
fn truncate(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Records an accepted write inside its transaction.
pub async fn ok(conn: &mut PgConnection, write: &Write, result: &str) -> Result<(), sqlx::Error> {
    store::record_audit(conn, &write.entry(true, result)).await
}

/// Passes `done` on; a refusal is recorded first (best effort: an audit
/// that cannot be written is logged, and the refusal still answered).
pub async fn on_failure(
    state: &State,
    write: &Write,
    done: Result<HttpResponse, ApiError>,
) -> Result<HttpResponse, ApiError> {
    let Err(e) = done else {
        return done;
    };
    let result = match &e.field {
        Some(field) => format!("{} ({field})", e.code),
        None => e.code.to_owned(),
    };
    let recorded = async {
        let mut conn = state.pool.single_in(&write.scope).await?;
        store::record_audit(&mut conn, &write.entry(false, &result)).await?;
        conn.finish().await
    }
    .await;
    if let Err(err) = recorded {
        tracing::warn!(error = %err, action = write.action, "could not audit a refused write");
    }
    Err(e)
}
