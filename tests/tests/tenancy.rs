//! Tenants isolated by PostgreSQL itself (docs/tenants.md, "Isolation"):
//! every tenant table has row-level security and its one policy, the role
//! the binaries connect as owns nothing and cannot bypass the policies, a
//! statement run as that role with no tenant set sees no row, and a
//! tenant's scope sees and writes its own rows only. Raw statements, as an
//! attacker with the binaries' credentials would send them.

use std::collections::BTreeMap;
use std::time::Duration;

use oncehook_common::store::scope::SERVICE_ROLE;
use oncehook_e2e::ops::{ctl_json, ctl_ok};
use oncehook_e2e::{TestEnv, eventually};
use sqlx::{Connection, PgConnection, Row};

/// The tables that belong to no tenant: the schema's bookkeeping.
const PLATFORM_TABLES: &[&str] = &["_sqlx_migrations", "schema_rollouts"];

/// Every table of the schema, with whether it has a `tenant_id` column,
/// whether row-level security is on, and its policies' commands and
/// expressions.
async fn tables(env: &TestEnv) -> BTreeMap<String, (bool, bool, Vec<(String, String, String)>)> {
    let rows = sqlx::query(
        "SELECT c.relname::text AS name, c.relrowsecurity AS rls,
                EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid
                        AND a.attname IN ('tenant_id', 'id') AND NOT a.attisdropped
                        AND (a.attname = 'tenant_id' OR c.relname = 'tenants')) AS has_tenant
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
         ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .expect("read the tables");
    let mut out = BTreeMap::new();
    for row in rows {
        let name: String = row.get("name");
        let policies = sqlx::query(
            "SELECT cmd::text AS cmd, coalesce(qual, '') AS qual, coalesce(with_check, '') AS with_check
             FROM pg_policies WHERE schemaname = 'public' AND tablename = $1",
        )
        .bind(&name)
        .fetch_all(&env.pool)
        .await
        .expect("read the policies")
        .into_iter()
        .map(|p| (p.get("cmd"), p.get("qual"), p.get("with_check")))
        .collect();
        out.insert(name, (row.get("has_tenant"), row.get("rls"), policies));
    }
    out
}

#[tokio::test]
async fn every_tenant_table_has_row_level_security_and_its_one_policy() {
    let env = TestEnv::new().await;
    let tables = tables(&env).await;
    assert!(tables.contains_key("orders") && tables.contains_key("tenants"));
    let mut faults = Vec::new();
    for (name, (has_tenant, rls, policies)) in &tables {
        if PLATFORM_TABLES.contains(&name.as_str()) {
            continue;
        }
        let column = if name == "tenants" { "id" } else { "tenant_id" };
        if !has_tenant {
            faults.push(format!("{name}: no tenant_id column"));
        }
        if !rls {
            faults.push(format!("{name}: row-level security is off"));
        }
        let expected = format!("oncehook_sees({column})");
        match policies.as_slice() {
            [(cmd, qual, check)] if cmd == "ALL" && *qual == expected && *check == expected => {}
            other => faults.push(format!(
                "{name}: expected one policy for ALL commands, USING and WITH CHECK {expected}; found {other:?}"
            )),
        }
    }
    assert!(
        faults.is_empty(),
        "tenant tables without their isolation (a new table needs tenant_id, \
         row-level security and the tenant_scope policy, as migrations/20261222000001_tenants.sql \
         gives the others; or a place in PLATFORM_TABLES if it belongs to no tenant):\n{}",
        faults.join("\n")
    );
}

#[tokio::test]
async fn the_binaries_role_owns_no_table_and_cannot_bypass_the_policies() {
    let env = TestEnv::new().await;
    let role = sqlx::query(
        "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = $1",
    )
    .bind(SERVICE_ROLE)
    .fetch_one(&env.pool)
    .await
    .expect("the binaries' role exists");
    for flag in ["rolsuper", "rolbypassrls", "rolcreaterole", "rolcreatedb"] {
        assert!(!role.get::<bool, _>(flag), "{SERVICE_ROLE} has {flag}");
    }
    let owned: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE r.rolname = $1 AND n.nspname = 'public'",
    )
    .bind(SERVICE_ROLE)
    .fetch_all(&env.pool)
    .await
    .expect("read the owners");
    assert!(owned.is_empty(), "{SERVICE_ROLE} owns {owned:?}");
    // The forced policies would hold even for an owner; none is forced, so
    // the previous release (connecting as the owner during a roll) is
    // untouched. The binaries' role must therefore never own a table.
    let mut conn = PgConnection::connect(&env.service_url())
        .await
        .expect("connect as the binaries' role");
    let refused = sqlx::query("ALTER TABLE orders DISABLE ROW LEVEL SECURITY")
        .execute(&mut conn)
        .await;
    assert!(refused.is_err(), "the binaries' role switched security off");
    let refused = sqlx::query("SET row_security = off")
        .execute(&mut conn)
        .await
        .and(
            sqlx::query("SELECT count(*) FROM orders")
                .execute(&mut conn)
                .await,
        );
    assert!(
        refused.is_err(),
        "with row_security off a query subject to a policy must fail, not see everything"
    );
}

/// Rows of the default tenant in a few tables, written as the owner.
async fn some_rows(env: &TestEnv) {
    for sql in [
        "INSERT INTO products (sku, name, stock) VALUES ('sku-1', 'Tea', 5)",
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency)
         VALUES ('order_1042', 'a@example.com', 500, 'INR')",
        "INSERT INTO order_items (order_id, sku, qty) SELECT id, 'sku-1', 1 FROM orders",
        "INSERT INTO processed_webhooks (provider, source, event_id, event_type, outcome, received_at)
         VALUES ('razorpay', 'razorpay', 'evt_1', 'payment.captured', 'applied', now())",
        "INSERT INTO stock_adjustments (sku, delta, key_name) VALUES ('sku-1', -1, 'demo-shop')",
    ] {
        sqlx::query(sql)
            .execute(&env.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn a_statement_without_a_tenant_set_sees_no_row_of_any_tenant_table() {
    let env = TestEnv::new().await;
    some_rows(&env).await;
    let tables = tables(&env).await;
    let mut conn = PgConnection::connect(&env.service_url())
        .await
        .expect("connect as the binaries' role");
    let mut seen_by_owner = 0;
    for name in tables
        .keys()
        .filter(|n| !PLATFORM_TABLES.contains(&n.as_str()))
    {
        let sql = format!("SELECT count(*) FROM \"{name}\"");
        let owner: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_one(&env.pool)
            .await
            .expect("count as the owner");
        let service: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{SERVICE_ROLE} may read {name}: {e}"));
        assert_eq!(service, 0, "{name}: {service} rows seen with no tenant set");
        seen_by_owner += usize::from(owner > 0);
    }
    assert!(
        seen_by_owner >= 5,
        "the owner saw rows in only {seen_by_owner} tables"
    );
    let deleted = sqlx::query("DELETE FROM orders")
        .execute(&mut conn)
        .await
        .expect("a delete with no tenant set runs");
    assert_eq!(
        deleted.rows_affected(),
        0,
        "deleted another tenant's orders"
    );
}

#[tokio::test]
async fn a_tenants_scope_sees_and_writes_its_own_rows_only() {
    let env = TestEnv::new().await;
    some_rows(&env).await;
    let mut conn = PgConnection::connect(&env.service_url())
        .await
        .expect("connect as the binaries' role");
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("SET LOCAL oncehook.tenants = 'acme'")
        .execute(&mut *tx)
        .await
        .expect("set the scope");
    // A row inserted in acme's scope is acme's without naming it.
    sqlx::query("INSERT INTO products (sku, name, stock) VALUES ('sku-acme', 'Coffee', 3)")
        .execute(&mut *tx)
        .await
        .expect("insert in acme's scope");
    let seen: Vec<(String, String)> = sqlx::query_as("SELECT sku, tenant_id FROM products")
        .fetch_all(&mut *tx)
        .await
        .expect("read in acme's scope");
    assert_eq!(seen, vec![("sku-acme".to_owned(), "acme".to_owned())]);
    let updated = sqlx::query("UPDATE orders SET customer_email = 'x@example.com'")
        .execute(&mut *tx)
        .await
        .expect("update");
    assert_eq!(
        updated.rows_affected(),
        0,
        "acme updated the default tenant's order"
    );
    tx.commit().await.expect("commit");

    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("SET LOCAL oncehook.tenants = 'acme'")
        .execute(&mut *tx)
        .await
        .expect("set the scope");
    let refused = sqlx::query(
        "INSERT INTO products (sku, name, stock, tenant_id) VALUES ('sku-2', 'Milk', 1, 'default')",
    )
    .execute(&mut *tx)
    .await;
    let err = refused.expect_err("acme wrote a row of the default tenant");
    assert!(
        err.to_string().contains("row-level security"),
        "refused for another reason: {err}"
    );
    drop(tx);

    // The scope ends with its transaction.
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM products")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(after, 0);
    // The platform's scope sees both tenants.
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("SET LOCAL oncehook.tenants = '*'")
        .execute(&mut *tx)
        .await
        .expect("set the scope");
    let both: Vec<String> = sqlx::query_scalar("SELECT tenant_id FROM products ORDER BY tenant_id")
        .fetch_all(&mut *tx)
        .await
        .expect("read");
    assert_eq!(both, vec!["acme".to_owned(), "default".to_owned()]);
}

#[tokio::test]
async fn the_binaries_connect_as_the_service_role() {
    let mut env = TestEnv::new().await;
    let _worker = env.start_worker().await;
    let users = eventually("the worker connected", Duration::from_secs(20), || async {
        let users: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT usename::text FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid() AND usename <> 'postgres'",
        )
        .bind(&env.db_name)
        .fetch_all(&env.pool)
        .await
        .ok()?;
        (!users.is_empty()).then_some(users)
    })
    .await;
    assert_eq!(users, vec![SERVICE_ROLE.to_owned()]);
}

#[tokio::test]
async fn oncehookctl_creates_lists_disables_and_enables_tenants() {
    let env = TestEnv::new().await;
    let created = ctl_json(
        &env,
        &["tenants", "create", "acme-shop", "--name", "Acme Shop"],
    )
    .await;
    assert_eq!(created["tenant"]["id"], "acme-shop");
    assert_eq!(created["tenant"]["status"], "active");
    let listed = ctl_json(&env, &["tenants", "list"]).await;
    let ids: Vec<&str> = listed["tenants"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, vec!["acme-shop", "default"]);

    // Refusals name what is wrong and change nothing.
    for (args, says) in [
        (
            vec!["tenants", "create", "acme-shop", "--name", "Again"],
            "already exists",
        ),
        (
            vec!["tenants", "create", "Acme", "--name", "X"],
            "not a tenant id",
        ),
        (
            vec!["tenants", "create", "x1", "--name", " "],
            "name must be",
        ),
        (vec!["tenants", "disable", "default"], "cannot be disabled"),
        (vec!["tenants", "disable", "nobody"], "no tenant nobody"),
        (vec!["tenants", "show", "nobody"], "no tenant nobody"),
    ] {
        let (code, _, stderr) = env.ctl(&args).await;
        assert_ne!(code, 0, "{args:?} succeeded");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }

    let disabled = ctl_json(&env, &["tenants", "disable", "acme-shop"]).await;
    assert_eq!(disabled["tenant"]["status"], "disabled");
    assert!(disabled["tenant"]["disabled_at"].is_string());
    let enabled = ctl_json(&env, &["tenants", "enable", "acme-shop"]).await;
    assert_eq!(enabled["tenant"]["status"], "active");
    assert!(enabled["tenant"]["disabled_at"].is_null());
    let text = ctl_ok(&env, &["tenants", "show", "acme-shop"]).await;
    assert!(
        text.contains("Acme Shop") && text.contains("active"),
        "{text}"
    );
}
