//! Tenants isolated by PostgreSQL itself (docs/tenants.md, "Isolation"):
//! every tenant table has row-level security and its one policy, the role
//! the binaries connect as owns nothing and cannot bypass the policies, a
//! statement run as that role with no tenant set sees no row, and a
//! tenant's scope sees and writes its own rows only. Raw statements, as an
//! attacker with the binaries' credentials would send them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use oncehook_common::store::scope::SERVICE_ROLE;
use oncehook_e2e::Secrets;
use oncehook_e2e::api::{Api, FULL_KEY, order_body};
use oncehook_e2e::console::{Console, OPERATOR, hash_line};
use oncehook_e2e::ops::{ctl_input, ctl_json, ctl_ok, dlq_list};
use oncehook_e2e::receiver::{Receiver, SECRET};
use oncehook_e2e::{TestEnv, eventually};
use oncehook_gateways::Gateway;
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, Row};

/// The two shops' API keys.
const ACME_KEY: &str = "ohk_test_acme_0123456789abcdefghijklmnopqrstuvw";
const GLOBEX_KEY: &str = "ohk_test_globex_0123456789abcdefghijklmnopqrstu";

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

/// The variable `oncehookctl migrate` reads the binaries' role's password from.
const SERVICE_ROLE_PASSWORD: &str = "ONCEHOOK_SERVICE_ROLE_PASSWORD";

/// The stored password of the binaries' role (`pg_authid.rolpassword`,
/// read as the superuser), if it has one.
async fn stored_password(env: &TestEnv) -> Option<String> {
    sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
        .bind(SERVICE_ROLE)
        .fetch_one(&env.pool)
        .await
        .expect("read the role's password")
}

/// Whether `verifier` (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`,
/// as PostgreSQL stores a password) was made from `password` (RFC 5802).
fn scram_verifies(verifier: &str, password: &str) -> bool {
    use base64::Engine as _;
    use hmac::{Hmac, KeyInit, Mac};
    let b64 = base64::engine::general_purpose::STANDARD;
    let hmac = |key: &[u8], data: &[u8]| {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    };
    let Some(rest) = verifier.strip_prefix("SCRAM-SHA-256$") else {
        return false;
    };
    let Some((params, keys)) = rest.split_once('$') else {
        return false;
    };
    let (Some((iterations, salt)), Some((stored_key, server_key))) =
        (params.split_once(':'), keys.split_once(':'))
    else {
        return false;
    };
    let (Ok(iterations), Ok(salt)) = (iterations.parse::<u32>(), b64.decode(salt)) else {
        return false;
    };
    // Hi(password, salt, i): PBKDF2 with HMAC-SHA-256, one block.
    let mut first = salt.clone();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(password.as_bytes(), &first);
    let mut salted = u.clone();
    for _ in 1..iterations {
        u = hmac(password.as_bytes(), &u);
        salted.iter_mut().zip(&u).for_each(|(s, x)| *s ^= x);
    }
    let client_key = hmac(&salted, b"Client Key");
    let stored = Sha256::digest(&client_key).to_vec();
    let server = hmac(&salted, b"Server Key");
    b64.encode(stored) == stored_key && b64.encode(server) == server_key
}

/// `oncehookctl migrate` with ONCEHOOK_SERVICE_ROLE_PASSWORD gives the
/// binaries' role that password (quotes, a backslash and `%` in it stay
/// as they are), prints it nowhere, and refuses an empty one. The local
/// Postgres trusts loopback, so a login would prove nothing: the stored
/// SCRAM verifier is checked against the password instead. The role's
/// previous password (a cluster's role, shared by every test database)
/// is put back.
#[tokio::test]
async fn migrate_gives_the_binaries_role_its_password() {
    let env = TestEnv::new().await;
    let (code, stdout, stderr) =
        ctl_input(&env, &["migrate"], &[(SERVICE_ROLE_PASSWORD, "")], "").await;
    assert_ne!(code, 0, "an empty password was taken:\n{stdout}\n{stderr}");
    assert!(stderr.contains(SERVICE_ROLE_PASSWORD), "{stderr}");

    let before = stored_password(&env).await;
    let password = "it's a \"pass\" with \\ and %L, $1 -- not SQL";
    let (code, stdout, stderr) = ctl_input(
        &env,
        &["migrate", "--json"],
        &[
            (SERVICE_ROLE_PASSWORD, password),
            ("ONCEHOOK_LOG", "debug,sqlx=trace"),
        ],
        "",
    )
    .await;
    let after = stored_password(&env).await;
    let restore = match &before {
        Some(p) => format!(
            "ALTER ROLE {SERVICE_ROLE} PASSWORD '{}'",
            p.replace('\'', "''")
        ),
        None => format!("ALTER ROLE {SERVICE_ROLE} PASSWORD NULL"),
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(restore))
        .execute(&env.pool)
        .await
        .expect("put the role's password back");
    assert_eq!(code, 0, "oncehookctl migrate:\n{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("--json");
    assert_eq!(report["service_role_password_set"], true, "{report}");
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(!text.contains(password), "the password is in the {what}");
    }
    let after = after.expect("the role has a password");
    assert!(
        scram_verifies(&after, password),
        "the stored password is not the one given: {after}"
    );
    assert!(!scram_verifies(&after, "it's a pass"));

    // Without the variable the password is left alone.
    let (code, stdout, stderr) = ctl_input(&env, &["migrate", "--json"], &[], "").await;
    assert_eq!(code, 0, "oncehookctl migrate:\n{stdout}\n{stderr}");
    let plain: serde_json::Value = serde_json::from_str(&stdout).expect("--json");
    assert_eq!(plain["service_role_password_set"], false, "{plain}");
    assert_eq!(
        stored_password(&env).await,
        before,
        "the password was changed"
    );
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

/// Every API route tried with acme's key against what only globex has: an
/// order, a product, their events. Reads and changes of globex's rows are
/// 404 (or leave them out of a list); a write under globex's name makes
/// acme's own row and leaves globex's as it was. Every route of the API's
/// OpenAPI document must be in the table (a new route fails here until it
/// is tried).
async fn cross_tenant_attempts_on_every_route(api: &Api) {
    let put = api
        .call(
            "PUT",
            "/v1/products/G-ONLY",
            Some(GLOBEX_KEY),
            Some(r#"{"name": "Globex only", "stock": 7}"#),
            &[],
        )
        .await;
    assert_eq!(put.status, 201, "{put:?}");
    let globex_order = order_body("globex_only", "G-ONLY", 1);
    let created = api
        .call(
            "POST",
            "/v1/orders",
            Some(GLOBEX_KEY),
            Some(&globex_order),
            &[("Idempotency-Key", "k-2")],
        )
        .await;
    assert_eq!(created.status, 201, "{created:?}");

    // (method, route as the OpenAPI document names it, path, body, what acme gets)
    let acme_order =
        order_body("globex_only", "MUG", 1).replace("buyer@shop.example", "buyer@acme.example");
    let attempts: Vec<(&str, &str, &str, Option<&str>, u16)> = vec![
        (
            "GET",
            "/v1/orders/{order_ref}",
            "/v1/orders/globex_only",
            None,
            404,
        ),
        (
            "POST",
            "/v1/orders/{order_ref}/cancel",
            "/v1/orders/globex_only/cancel",
            Some("{}"),
            404,
        ),
        (
            "GET",
            "/v1/products/{sku}",
            "/v1/products/G-ONLY",
            None,
            404,
        ),
        (
            "POST",
            "/v1/products/{sku}/stock",
            "/v1/products/G-ONLY/stock",
            Some(r#"{"delta": -5}"#),
            404,
        ),
        ("GET", "/v1/orders", "/v1/orders", None, 200),
        ("GET", "/v1/events", "/v1/events", None, 200),
        // Writes under globex's names make acme's own rows.
        (
            "PUT",
            "/v1/products/{sku}",
            "/v1/products/G-ONLY",
            Some(r#"{"name": "Acme's", "stock": 1}"#),
            201,
        ),
        (
            "POST",
            "/v1/orders",
            "/v1/orders",
            Some(acme_order.as_str()),
            201,
        ),
        // Not a tenant's: the document itself.
        ("GET", "/v1/openapi.json", "/v1/openapi.json", None, 200),
        // The platform's admin API: a tenant's key is no admin key (401),
        // for globex's rows as for anyone's.
        (
            "POST",
            "/v1/admin/tenants",
            "/v1/admin/tenants",
            Some(r#"{"id": "acme2", "name": "A"}"#),
            401,
        ),
        ("GET", "/v1/admin/tenants", "/v1/admin/tenants", None, 401),
        (
            "GET",
            "/v1/admin/tenants/{tenant}",
            "/v1/admin/tenants/globex",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/tenants/{tenant}/disable",
            "/v1/admin/tenants/globex/disable",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/tenants/{tenant}/enable",
            "/v1/admin/tenants/globex/enable",
            None,
            401,
        ),
        (
            "PUT",
            "/v1/admin/tenants/{tenant}/mail-from",
            "/v1/admin/tenants/globex/mail-from",
            Some(r#"{"mail_from": "Acme <x@acme.example>"}"#),
            401,
        ),
        (
            "POST",
            "/v1/admin/tenants/{tenant}/keys",
            "/v1/admin/tenants/globex/keys",
            Some(r#"{"name": "x", "scopes": ["orders:read"]}"#),
            401,
        ),
        (
            "GET",
            "/v1/admin/tenants/{tenant}/keys",
            "/v1/admin/tenants/globex/keys",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/keys/{id}/revoke",
            "/v1/admin/keys/key_0/revoke",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/sources",
            "/v1/admin/sources",
            Some(r#"{"name": "g2", "tenant": "globex", "gateway": "razorpay", "secret": "x"}"#),
            401,
        ),
        ("GET", "/v1/admin/sources", "/v1/admin/sources", None, 401),
        (
            "GET",
            "/v1/admin/sources/{name}",
            "/v1/admin/sources/globex-razorpay",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/sources/{name}/secrets",
            "/v1/admin/sources/globex-razorpay/secrets",
            Some(r#"{"secret": "x"}"#),
            401,
        ),
        (
            "POST",
            "/v1/admin/sources/{name}/secrets/{no}/retire",
            "/v1/admin/sources/globex-razorpay/secrets/1/retire",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/sources/{name}/disable",
            "/v1/admin/sources/globex-razorpay/disable",
            None,
            401,
        ),
        (
            "POST",
            "/v1/admin/sources/{name}/enable",
            "/v1/admin/sources/globex-razorpay/enable",
            None,
            401,
        ),
        (
            "GET",
            "/v1/admin/feed/sources",
            "/v1/admin/feed/sources",
            None,
            401,
        ),
    ];
    let doc = api.get("/v1/openapi.json", ACME_KEY).await;
    let documented: BTreeSet<(String, String)> = doc.json["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let tried: BTreeSet<(String, String)> = attempts
        .iter()
        .map(|(m, route, ..)| ((*m).to_owned(), (*route).to_owned()))
        .collect();
    let untried: Vec<_> = documented.difference(&tried).collect();
    assert!(
        untried.is_empty(),
        "routes with no cross-tenant attempt: {untried:?}"
    );
    for (method, _, path, body, want) in &attempts {
        let a = api
            .call(
                method,
                path,
                Some(ACME_KEY),
                *body,
                &[("Idempotency-Key", "k-acme")],
            )
            .await;
        assert_eq!(a.status, *want, "{method} {path} with acme's key: {a:?}");
        let text = a.json.to_string();
        assert!(
            !text.contains("buyer@shop.example")
                && !text.contains("buyer@globex.example")
                && !text.contains("Globex only"),
            "{method} {path} with acme's key shows globex's: {text}"
        );
    }
    // Globex's rows are as they were.
    let product = api.get("/v1/products/G-ONLY", GLOBEX_KEY).await;
    assert_eq!(
        (
            product.json["stock"].as_i64(),
            product.json["name"].as_str()
        ),
        (Some(7), Some("Globex only"))
    );
    let order = api.get("/v1/orders/globex_only", GLOBEX_KEY).await;
    assert_eq!(order.json["status"], "pending", "{order:?}");
    assert_eq!(
        order.json["customer_email"], "buyer@shop.example",
        "{order:?}"
    );
}

/// What only globex has for acme's operator to try: a refund intent (its
/// order paid twice), a failed delivery to its endpoint, which is disabled.
struct GlobexRows {
    intent: String,
}

impl GlobexRows {
    async fn made(env: &TestEnv, url: &str) -> GlobexRows {
        let spec = env.spec("order_1042", "pay_1042_again", "evt_globex_again", 25_000);
        let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        env.post_ok(url, "globex-razorpay", &d).await;
        let intent: String = eventually(
            "globex's refund intent",
            Duration::from_secs(30),
            || async {
                sqlx::query_scalar("SELECT id FROM refund_intents WHERE tenant_id = 'globex'")
                    .fetch_optional(&env.pool)
                    .await
                    .expect("intents")
            },
        )
        .await;
        let failed = sqlx::query(
            "UPDATE notify_deliveries SET status = 'failed' WHERE tenant_id = 'globex'",
        )
        .execute(&env.pool)
        .await
        .expect("fail globex's deliveries");
        assert!(failed.rows_affected() > 0, "globex has deliveries");
        let disabled = sqlx::query(
            "UPDATE notify_endpoints SET disabled_at = now(), disabled_reason = 'test'
             WHERE tenant_id = 'globex'",
        )
        .execute(&env.pool)
        .await
        .expect("disable globex's endpoint");
        assert_eq!(disabled.rows_affected(), 1);
        GlobexRows { intent }
    }

    /// Nothing acme's operator did changed globex's rows.
    async fn unchanged(&self, env: &TestEnv) {
        let (state, failed, disabled): (String, i64, bool) = sqlx::query_as(
            "SELECT (SELECT state FROM refund_intents WHERE id = $1),
                    (SELECT count(*) FROM notify_deliveries WHERE tenant_id = 'globex' AND status = 'failed'),
                    (SELECT disabled_at IS NOT NULL FROM notify_endpoints WHERE tenant_id = 'globex')",
        )
        .bind(&self.intent)
        .fetch_one(&env.pool)
        .await
        .expect("globex's rows");
        assert_eq!(state, "owed", "globex's intent");
        assert!(failed > 0, "globex's failed deliveries were replayed");
        assert!(disabled, "globex's endpoint was enabled");
    }
}

/// The console's routes, `(METHOD, path)`, read from where they are
/// registered (`crates/console/src/main.rs`).
fn console_routes() -> BTreeSet<(String, String)> {
    let main = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/console/src/main.rs"),
    )
    .expect("the console's main.rs");
    let flat: String = main.split_whitespace().collect::<Vec<_>>().join("");
    flat.split("route(\"")
        .skip(1)
        .filter_map(|rest| {
            let (path, rest) = rest.split_once('"')?;
            let method = rest.strip_prefix(",web::")?.split_once('(')?.0;
            Some((method.to_uppercase(), path.to_owned()))
        })
        .collect()
}

/// Every page and action of the console tried by acme's operator against
/// what only globex has: a page shows none of it, an action is refused
/// (403 or 404) and changes nothing. Every route the console registers must
/// be in the table but the login, logout and static assets (a new route
/// fails here until it is tried).
async fn cross_tenant_attempts_on_every_console_route(
    env: &TestEnv,
    console: &Console,
    ada: &str,
    globex: &GlobexRows,
    letter: &str,
) {
    let csrf = console.get("/letters", Some(ada)).await.csrf();
    let csrf = csrf.as_str();
    let intent = globex.intent.as_str();
    // (method, route, path, form, the statuses allowed)
    type Attempt<'a> = (&'a str, &'a str, String, Vec<(&'a str, &'a str)>, &'a [u16]);
    let attempts: Vec<Attempt> = vec![
        ("GET", "/", "/".into(), vec![], &[303]),
        ("GET", "/letters", "/letters".into(), vec![], &[200]),
        (
            "GET",
            "/letters/{id}",
            format!("/letters/{letter}"),
            vec![],
            &[404],
        ),
        (
            "POST",
            "/letters/preview",
            "/letters/preview".into(),
            vec![("csrf", csrf), ("ids", letter)],
            &[200, 400, 404],
        ),
        (
            "POST",
            "/letters/replay",
            "/letters/replay".into(),
            vec![("csrf", csrf), ("confirm", "yes"), ("ids", letter)],
            &[403],
        ),
        (
            "POST",
            "/letters/purge",
            "/letters/purge".into(),
            vec![("csrf", csrf), ("confirm", "yes"), ("ids", letter)],
            &[403],
        ),
        ("GET", "/events", "/events".into(), vec![], &[200]),
        (
            "GET",
            "/trace",
            "/trace?q=evt_globex".into(),
            vec![],
            &[200],
        ),
        (
            "GET",
            "/notifications",
            "/notifications".into(),
            vec![],
            &[200],
        ),
        (
            "POST",
            "/notifications/replay",
            "/notifications/replay".into(),
            vec![("csrf", csrf), ("endpoint", "globex-hook")],
            &[200, 404],
        ),
        (
            "POST",
            "/notifications/enable",
            "/notifications/enable".into(),
            vec![("csrf", csrf), ("endpoint", "globex-hook")],
            &[404],
        ),
        ("GET", "/refunds", "/refunds".into(), vec![], &[200]),
        (
            "POST",
            "/refunds/approve",
            "/refunds/approve".into(),
            vec![("csrf", csrf), ("intent", intent)],
            &[404],
        ),
        (
            "POST",
            "/refunds/cancel",
            "/refunds/cancel".into(),
            vec![("csrf", csrf), ("intent", intent)],
            &[404],
        ),
        (
            "POST",
            "/refunds/pause",
            "/refunds/pause".into(),
            vec![("csrf", csrf)],
            &[403],
        ),
        (
            "POST",
            "/refunds/resume",
            "/refunds/resume".into(),
            vec![("csrf", csrf)],
            &[403],
        ),
        ("GET", "/audit", "/audit".into(), vec![], &[200]),
    ];
    let not_tenants: BTreeSet<&str> = [
        "/login",
        "/logout",
        "/static/console.css",
        "/static/console.js",
    ]
    .into();
    let tried: BTreeSet<(String, String)> = attempts
        .iter()
        .map(|(m, route, ..)| ((*m).to_owned(), (*route).to_owned()))
        .collect();
    let untried: Vec<_> = console_routes()
        .into_iter()
        .filter(|(_, p)| !not_tenants.contains(p.as_str()))
        .filter(|r| !tried.contains(r))
        .collect();
    assert!(
        untried.is_empty(),
        "console routes with no cross-tenant attempt: {untried:?}"
    );
    for (method, _, path, form, allowed) in &attempts {
        let a = if *method == "GET" {
            console.get(path, Some(ada)).await
        } else {
            console.post(path, Some(ada), form).await
        };
        assert!(
            allowed.contains(&a.status),
            "{method} {path} as acme's operator: {} (allowed {allowed:?})\n{}",
            a.status,
            a.body
        );
        // What the attempt itself named may be said back; nothing else of
        // globex's may show.
        let named = |t: &str| path.contains(t) || form.iter().any(|(_, v)| v.contains(t));
        for globex_only in [
            "evt_globex",
            "evt_ghost_g",
            "globex-hook",
            "globex-shop",
            intent,
        ] {
            assert!(
                !a.body.contains(globex_only) || named(globex_only),
                "{method} {path} as acme's operator shows globex's {globex_only}:\n{}",
                a.body
            );
        }
    }
    globex.unchanged(env).await;
}

/// Two shops on one deployment, each with its own Razorpay source and API
/// key, both selling `MUG` and both taking an order `order_1042` paid by a
/// payment with the same id: separate books, stock and emails, and neither
/// key reaches the other's orders or products.
#[tokio::test]
async fn two_tenants_with_the_same_order_ref_and_gateway_keep_separate_books() {
    let mut env = TestEnv::new().await;
    for (id, name) in [("acme", "Acme"), ("globex", "Globex")] {
        ctl_ok(&env, &["tenants", "create", id, "--name", name]).await;
    }
    // Acme's customers hear from Acme; globex's from the deployment's sender.
    ctl_ok(
        &env,
        &[
            "tenants",
            "mail-from",
            "acme",
            "Acme Shop <orders@acme.example>",
        ],
    )
    .await;
    let (code, _, err) = env
        .ctl(&["tenants", "mail-from", "globex", "not an address"])
        .await;
    assert!(code != 0 && err.contains("one mailbox"), "{err}");
    let key_entry = |name: &str, key: &str, tenant: &str| {
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        format!(
            "[[api.key]]\nname = \"{name}\"\nhash = \"{hash}\"\ntenant = \"{tenant}\"\n\
             scopes = [\"orders:write\", \"orders:read\", \"products:write\", \"events:read\"]\n"
        )
    };
    env.append_config(&format!(
        "[[source]]\nname = \"acme-razorpay\"\ngateway = \"razorpay\"\nsecrets = [\"{s}\"]\ntenant = \"acme\"\n\n\
         [[source]]\nname = \"globex-razorpay\"\ngateway = \"razorpay\"\nsecrets = [\"{s}\"]\ntenant = \"globex\"\n\n{}\n{}",
        key_entry("acme-shop", ACME_KEY, "acme"),
        key_entry("globex-shop", GLOBEX_KEY, "globex"),
        s = Secrets::RAZORPAY,
    ));
    // Each shop's endpoint for its order events.
    let acme_rx = Receiver::start(SECRET).await;
    let globex_rx = Receiver::start(SECRET).await;
    for (name, rx, tenant) in [
        ("acme-hook", &acme_rx, "acme"),
        ("globex-hook", &globex_rx, "globex"),
    ] {
        env.append_config(&format!(
            "[[notify.endpoint]]\nname = \"{name}\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.*\"]\ntenant = \"{tenant}\"\n",
            rx.url
        ));
    }
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let _mailer = env.start_mailer().await;
    let _notifier = env.start_consumer("oncehook-notifier", &[]).await;
    // Every admin route tried with a tenant's key is a failed
    // authentication: more than the default throttle lets one client make.
    let api = Api::start(
        &mut env,
        &[("ONCEHOOK_API_AUTH_FAILURES_PER_MINUTE", "1000")],
    )
    .await;

    for (key, stock, email) in [
        (ACME_KEY, 10, "buyer@acme.example"),
        (GLOBEX_KEY, 20, "buyer@globex.example"),
    ] {
        let put = api
            .call(
                "PUT",
                "/v1/products/MUG",
                Some(key),
                Some(&format!(r#"{{"name": "Mug", "stock": {stock}}}"#)),
                &[],
            )
            .await;
        assert_eq!(put.status, 201, "{put:?}");
        let body = order_body("order_1042", "MUG", 1).replace("buyer@shop.example", email);
        let created = api
            .call(
                "POST",
                "/v1/orders",
                Some(key),
                Some(&body),
                &[("Idempotency-Key", "k-1")],
            )
            .await;
        assert_eq!(created.status, 201, "{created:?}");
    }
    // Each source's capture, the same payment id at both.
    for (source, event) in [
        ("acme-razorpay", "evt_acme"),
        ("globex-razorpay", "evt_globex"),
    ] {
        let spec = env.spec("order_1042", "pay_1042", event, 25_000);
        let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        env.post_ok(&url, source, &d).await;
    }
    for (key, stock, email) in [
        (ACME_KEY, 9, "buyer@acme.example"),
        (GLOBEX_KEY, 19, "buyer@globex.example"),
    ] {
        let order = eventually("the order paid", Duration::from_secs(30), || async {
            let a = api.get("/v1/orders/order_1042", key).await;
            (a.json["status"] == "paid").then_some(a.json)
        })
        .await;
        assert_eq!(order["customer_email"], email, "{order}");
        let listed = api.get("/v1/orders", key).await;
        let refs: Vec<&str> = listed.json["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o["order_ref"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(refs, vec!["order_1042"], "{key}: {listed:?}");
        let product = api.get("/v1/products/MUG", key).await;
        assert_eq!(product.json["stock"], stock, "{product:?}");
    }
    // A capture for an order neither shop has, at each shop: dead-lettered
    // (unknown_order), and `dlq list --tenant` shows each shop's own.
    for (source, event) in [
        ("acme-razorpay", "evt_ghost_a"),
        ("globex-razorpay", "evt_ghost_g"),
    ] {
        let spec = env.spec("ghost", "pay_ghost", event, 25_000);
        let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        env.post_ok(&url, source, &d).await;
    }
    eventually("both dead letters", Duration::from_secs(30), || async {
        (dlq_list(&env, &[]).await.len() == 2).then_some(())
    })
    .await;
    for (tenant, source) in [("acme", "acme-razorpay"), ("globex", "globex-razorpay")] {
        let letters = dlq_list(&env, &["--tenant", tenant]).await;
        let sources: Vec<&str> = letters
            .iter()
            .filter_map(|l| l["source"].as_str())
            .collect();
        assert_eq!(sources, vec![source], "{letters:?}");
    }
    assert!(dlq_list(&env, &["--tenant", "default"]).await.is_empty());

    // The database's figures per tenant: each shop applied its one capture.
    let applied = |stats: &serde_json::Value| {
        stats["gateways"]
            .as_array()
            .and_then(|g| g.iter().find(|r| r["gateway"] == "razorpay"))
            .and_then(|r| r["applied"].as_i64())
    };
    for tenant in ["acme", "globex"] {
        let stats = ctl_json(&env, &["stats", "--tenant", tenant]).await;
        assert_eq!(stats["tenant"], tenant, "{stats}");
        assert_eq!(applied(&stats), Some(1), "{tenant}: {stats}");
    }
    assert_eq!(applied(&ctl_json(&env, &["stats"]).await), Some(2));
    let (code, _, stderr) = env.ctl(&["stats", "--tenant", "Acme"]).await;
    assert!(code != 0 && stderr.contains("not a tenant id"), "{stderr}");

    // The books, as the owner sees them: one order, payment and email each.
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT o.tenant_id, o.status, p.tenant_id FROM orders o
         JOIN payments p ON p.order_id = o.id WHERE o.order_ref = 'order_1042' ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .expect("the books");
    assert_eq!(
        rows,
        vec![
            ("acme".into(), "paid".into(), "acme".into()),
            ("globex".into(), "paid".into(), "globex".into())
        ]
    );
    eventually("both emails sent", Duration::from_secs(30), || async {
        (env.mail_files().len() == 2).then_some(())
    })
    .await;
    let mails: Vec<String> = env
        .mail_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    for (email, from) in [
        ("buyer@acme.example", "<orders@acme.example>"),
        ("buyer@globex.example", "<orders@oncehook.local>"),
    ] {
        let theirs: Vec<&String> = mails.iter().filter(|m| m.contains(email)).collect();
        assert_eq!(theirs.len(), 1, "{email}");
        let sender = theirs[0]
            .lines()
            .find(|l| l.starts_with("From:"))
            .unwrap_or("");
        assert!(sender.ends_with(from), "{email}'s sender: {sender}");
    }

    // Order events: each shop's endpoint gets its own order's, signed, and
    // never the other's.
    for (rx, email) in [
        (&acme_rx, "buyer@acme.example"),
        (&globex_rx, "buyer@globex.example"),
    ] {
        let paid = eventually("the shop's order.paid", Duration::from_secs(30), || async {
            rx.received()
                .into_iter()
                .find(|r| r.event["type"] == "order.paid")
        })
        .await;
        assert!(paid.verified, "{:?}", paid.event);
        for r in rx.received() {
            assert_eq!(r.event["order"]["customer_email"], email, "{}", r.event);
        }
    }

    cross_tenant_attempts_on_every_route(&api).await;
    // The default tenant's key (the API's own test keys) sees neither.
    assert_eq!(api.get("/v1/orders/order_1042", FULL_KEY).await.status, 404);

    // The console: acme's operator sees acme's events and traces only, and
    // none of the platform's pages; a platform operator sees both shops.
    let mut acme_user = hash_line(&env, "ada", "operator", "acme-password-1").await;
    acme_user.push_str("tenants = [\"acme\"]\n");
    env.append_config(&acme_user);
    let console = Console::start(&mut env, &[]).await;
    let ada = console.login(("ada", "acme-password-1")).await;
    let olga = console.login(OPERATOR).await;
    let events = console.get("/events", Some(&ada)).await;
    assert_eq!(events.status, 200);
    assert!(
        events.body.contains("evt_acme") && !events.body.contains("evt_globex"),
        "{}",
        events.body
    );
    let all = console.get("/events", Some(&olga)).await;
    assert!(all.body.contains("evt_acme") && all.body.contains("evt_globex"));
    let traced = console.get("/trace?q=evt_globex", Some(&ada)).await;
    assert!(traced.body.contains("No order"), "{}", traced.body);
    let traced = console.get("/trace?q=evt_globex", Some(&olga)).await;
    assert!(!traced.body.contains("No order"), "{}", traced.body);
    assert_eq!(console.get("/", Some(&ada)).await.status, 303);
    // Dead letters: each operator sees its tenants' only, and may act on
    // those only.
    let all = console.get("/letters", Some(&olga)).await;
    assert!(all.body.contains("evt_ghost_a") && all.body.contains("evt_ghost_g"));
    let globex_letter = dlq_list(&env, &["--tenant", "globex"]).await[0]["id"]
        .as_str()
        .expect("a letter id")
        .to_owned();
    assert_eq!(
        console
            .get(&format!("/letters/{globex_letter}"), Some(&olga))
            .await
            .status,
        200
    );
    let globex = GlobexRows::made(&env, &url).await;
    cross_tenant_attempts_on_every_console_route(&env, &console, &ada, &globex, &globex_letter)
        .await;
    // `oncehookctl`'s verbs that take a tenant keep to it.
    let (code, out, err) = env
        .ctl(&["dlq", "replay", "--tenant", "acme", &globex_letter])
        .await;
    assert_ne!(code, 0, "replaying globex's letter as acme's: {out}{err}");
    assert_eq!(dlq_list(&env, &["--tenant", "globex"]).await.len(), 1);

    // A disabled tenant's keys are refused within a couple of seconds; the
    // other shop's are not, and enabling it lets its keys in again.
    ctl_ok(&env, &["tenants", "disable", "acme"]).await;
    let refused = eventually("acme's key refused", Duration::from_secs(3), || async {
        let a = api.get("/v1/orders/order_1042", ACME_KEY).await;
        (a.status == 403).then_some(a)
    })
    .await;
    assert_eq!(refused.code(), "tenant_disabled", "{refused:?}");
    assert_eq!(
        api.get("/v1/orders/order_1042", GLOBEX_KEY).await.status,
        200
    );
    ctl_ok(&env, &["tenants", "enable", "acme"]).await;
    eventually(
        "acme's key let in again",
        Duration::from_secs(3),
        || async { (api.get("/v1/orders/order_1042", ACME_KEY).await.status == 200).then_some(()) },
    )
    .await;
}
