//! The ledger's one entry, [`Ledger::apply`], and how each input takes its
//! road: its own head (what it locks and records: `deliveries`, `waiting`,
//! `cancel`, `catch_up`), then the one tail (`tail`).

use oncehook_pipeline::{EffectError, Effects};
use sqlx::PgConnection;

use crate::cancel::{self, Cancelled};
use crate::input::{Cancel, CatchUp, Create, Creation, Deliveries, Known, Registered};
use crate::store::books::GatewayRef;
use crate::store::shop;
use crate::{catch_up, deliveries, waiting};

/// What comes into the ledger: every road a fact takes, each with what the
/// ledger answers for it. The roads are [`Deliveries`], [`Create`],
/// [`Known`], [`Cancel`] and [`CatchUp`]; [`Ledger::apply`] is the one entry.
pub trait Input: sealed::Road {}

mod sealed {
    use std::future::Future;

    use oncehook_pipeline::EffectError;
    use sqlx::PgConnection;

    /// How an input takes its road: its own head (what it locks and
    /// records), then the ledger's one tail.
    pub trait Road {
        type Answer;
        fn take(
            self,
            conn: &mut PgConnection,
        ) -> impl Future<Output = Result<Self::Answer, EffectError>> + Send;
    }
}

impl Input for CatchUp<'_> {}
impl Input for Deliveries<'_> {}
impl Input for Create<'_> {}
impl Input for Cancel<'_> {}
impl Input for Known<'_> {}

impl sealed::Road for Deliveries<'_> {
    type Answer = Effects;
    async fn take(self, conn: &mut PgConnection) -> Result<Effects, EffectError> {
        deliveries::deliveries_in(conn, self.0, deliveries::Keys::Held).await
    }
}

impl sealed::Road for Create<'_> {
    type Answer = Creation;
    async fn take(self, conn: &mut PgConnection) -> Result<Creation, EffectError> {
        let o = self.order;
        waiting::lock_refs(conn, &o.order_ref, &o.gateway_refs).await?;
        Ok(match shop::create_order(conn, o).await? {
            shop::Created::Order(_) => Creation::Created {
                applied: waiting::apply_waiting(conn, &o.order_ref, &o.gateway_refs).await?,
            },
            shop::Created::RefTaken => Creation::RefTaken,
            shop::Created::GatewayRefTaken(g) => Creation::GatewayRefTaken(g),
        })
    }
}

impl sealed::Road for Known<'_> {
    type Answer = Registered;
    async fn take(self, conn: &mut PgConnection) -> Result<Registered, EffectError> {
        waiting::lock_refs(conn, self.order_ref, self.gateway_refs).await?;
        let refs = crate::store::gateway_refs::add(conn, self.order_ref, self.gateway_refs).await?;
        let added: Vec<GatewayRef> = refs
            .iter()
            .filter(|r| r.added)
            .map(|r| r.gateway_ref.clone())
            .collect();
        let applied = if added.is_empty() {
            0
        } else {
            waiting::apply_waiting(conn, self.order_ref, &added).await?
        };
        Ok(Registered { refs, applied })
    }
}

impl sealed::Road for CatchUp<'_> {
    type Answer = usize;
    async fn take(self, conn: &mut PgConnection) -> Result<usize, EffectError> {
        Ok(catch_up::catch_up(conn, self).await?)
    }
}

impl sealed::Road for Cancel<'_> {
    type Answer = Cancelled;
    async fn take(self, conn: &mut PgConnection) -> Result<Cancelled, EffectError> {
        Ok(cancel::cancel(conn, self).await?)
    }
}

/// Takes `input` down its road, in `conn`'s transaction (`Ledger::apply`'s
/// work, and the rooms' own way in: a catch-up during a rollout).
pub(crate) async fn take<I: Input>(
    conn: &mut PgConnection,
    input: I,
) -> Result<I::Answer, EffectError> {
    input.take(conn).await
}
