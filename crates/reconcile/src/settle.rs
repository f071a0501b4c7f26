//! Settling a pass's answers (docs/reconciliation.md), one call at a time
//! as the sources' tasks hand them over: the references a call found are
//! registered, each fact it found is keyed as the ledger keys it and looked
//! up (recorded already, or missing), and each missing one is published at
//! once, stamped with its source's tenant, so one gateway's trouble never
//! delays another's findings.

use std::collections::BTreeSet;

use oncehook_common::Envelope;
use oncehook_gateway_api::{ApiSource, Publisher};
use oncehook_gateways::{Fact, NormalizedEvent};

use crate::report::{CallReport, FactReport, Found};
use crate::run::{Reconciler, RunError};
use crate::store::{self, FactKey};

/// The pass's settling of the answers, one call at a time as the sources'
/// tasks hand them over: what each fact found is (recorded already, or
/// missing), and each missing one published at once.
pub(crate) struct Settle<'a> {
    pub(crate) reconciler: &'a Reconciler,
    pub(crate) dry_run: bool,
    /// Every fact found so far in the pass: one found twice is settled once.
    pub(crate) seen: BTreeSet<FactKey>,
    /// Connected at the first fact to publish.
    pub(crate) publisher: Option<Publisher>,
    pub(crate) published: usize,
}

impl Settle<'_> {
    /// Registers the references `call` found, then decides what each of
    /// its facts is and publishes the missing ones (none in a dry run),
    /// recording both in `call.facts`.
    pub(crate) async fn call(
        &mut self,
        source: &ApiSource,
        call: &mut CallReport,
    ) -> Result<(), RunError> {
        let r = self.reconciler;
        if !self.dry_run {
            r.register_refs(source, call).await?;
        }
        let mut events = std::mem::take(&mut call.events);
        if call.order_ref.is_none() {
            events = r.about_our_orders(source, events).await?;
        }
        let mut found: Vec<(NormalizedEvent, FactKey)> = Vec::new();
        for event in events {
            let Some(key) = fact_key(&event) else {
                continue;
            };
            if self.seen.insert(key.clone()) {
                found.push((event, key));
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        let keys: Vec<FactKey> = found.iter().map(|(_, k)| k.clone()).collect();
        let recorded = store::recorded(&r.pool, &keys).await?;
        for ((event, _), recorded) in found.into_iter().zip(recorded) {
            let found = if recorded {
                Found::AlreadyRecorded
            } else {
                Found::MissingWebhook
            };
            metrics::counter!("oncehook_reconcile_facts_total", "source" => source.name.clone(), "found" => found.as_str())
                .increment(1);
            let mut fact = FactReport::of(&event, found);
            if found == Found::MissingWebhook && !self.dry_run {
                let publisher = match self.publisher {
                    Some(ref p) => p,
                    None => self.publisher.insert(Publisher::connect(&r.broker).await?),
                };
                publisher
                    .publish(&Envelope::reconciled(&source.name, event).for_tenant(&source.tenant))
                    .await?;
                fact.published = true;
                self.published += 1;
            }
            call.facts.push(fact);
        }
        Ok(())
    }
}

/// The fact an event records, keyed as the ledger keys it (by the
/// gateways crate's [`NormalizedEvent::fact`], as the ledger records it);
/// `None` for an event that records none, or that the ledger would refuse
/// for lack of a field.
pub fn fact_key(event: &NormalizedEvent) -> Option<FactKey> {
    Some(match event.fact().ok()?? {
        Fact::Attempt {
            provider,
            payment_id,
            status,
        } => FactKey::Attempt {
            provider: provider.as_str().to_owned(),
            payment_id,
            status: status.to_owned(),
        },
        Fact::Refund {
            provider,
            refund_id,
            ..
        } => FactKey::Refund {
            provider: provider.as_str().to_owned(),
            refund_id,
        },
    })
}
