//! Gateway references found after an order was created: the reconciler
//! found Razorpay's order by the `receipt` the shop gave it, and the
//! ledger's `Known` road registers it with the order here (the references
//! a shop gives at creation are written with the order, `shop.rs`).

use sqlx::PgConnection;

use super::shop::GatewayRef;

/// A gateway reference offered for an existing order, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRegistration {
    pub gateway_ref: GatewayRef,
    /// Registered now.
    pub added: bool,
    /// The order the reference belonged to already (this one, or another:
    /// a reference names one order, the first to register it).
    pub owner: Option<String>,
}

/// Registers gateway references for the existing order `order_ref` (call
/// it after the references' advisory locks): each reference no order has
/// is added; one already registered stays with its order. An unknown
/// `order_ref` adds nothing.
pub async fn add(
    conn: &mut PgConnection,
    order_ref: &str,
    gateway_refs: &[GatewayRef],
) -> Result<Vec<RefRegistration>, sqlx::Error> {
    let (gateways, refs): (Vec<String>, Vec<String>) = gateway_refs
        .iter()
        .map(|g| (g.gateway.clone(), g.gateway_ref.clone()))
        .unzip();
    let rows = sqlx::query!(
        r#"WITH offered AS (
               SELECT * FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(gateway, gateway_ref, n)),
           added AS (
               INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
               SELECT f.gateway, f.gateway_ref, o.id FROM offered f JOIN orders o ON o.order_ref = $1
               ORDER BY f.n
               ON CONFLICT DO NOTHING RETURNING gateway, gateway_ref)
           SELECT f.gateway AS "gateway!", f.gateway_ref AS "gateway_ref!",
                  EXISTS (SELECT 1 FROM added a
                          WHERE a.gateway = f.gateway AND a.gateway_ref = f.gateway_ref) AS "added!",
                  (SELECT o.order_ref FROM order_gateway_refs g JOIN orders o ON o.id = g.order_id
                   WHERE g.gateway = f.gateway AND g.gateway_ref = f.gateway_ref) AS owner
           FROM offered f ORDER BY f.n"#,
        order_ref,
        &gateways,
        &refs
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| RefRegistration {
            owner: if r.added {
                Some(order_ref.to_owned())
            } else {
                r.owner
            },
            gateway_ref: GatewayRef {
                gateway: r.gateway,
                gateway_ref: r.gateway_ref,
            },
            added: r.added,
        })
        .collect())
}
