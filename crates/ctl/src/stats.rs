//! `oncehookctl stats` (filled in next).

use clap::Args;
use oncehook_common::Settings;

use crate::output::Output;

#[derive(Args)]
pub struct StatsArgs {}

pub async fn run(_settings: &Settings, _args: StatsArgs, out: &Output) -> anyhow::Result<()> {
    out.done("not implemented yet", serde_json::json!({}));
    Ok(())
}
