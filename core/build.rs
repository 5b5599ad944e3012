// `sqlx::migrate!` embeds `migrations/` at compile time: rebuild when a migration is added
// or edited, not only when Rust code changes.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
