//! Rebuilds this crate when a migration is added or changed: the schema's
//! `sqlx::migrate!` embeds the migrations at compile time, and cargo does
//! not see a new file in that folder on its own (a binary and a test built
//! at different times would then disagree on the schema).
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
