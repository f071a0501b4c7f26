//! `oncehookctl dlq`: dead-letter inspection and replay (filled in next).

use std::process::ExitCode;

use clap::Subcommand;
use oncehook_common::Settings;

use crate::output::Output;

#[derive(Subcommand)]
pub enum DlqCommand {
    /// List dead letters without consuming them.
    List,
}

pub async fn run(
    _settings: &Settings,
    _command: DlqCommand,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    out.done("not implemented yet", serde_json::json!({}));
    Ok(ExitCode::FAILURE)
}
