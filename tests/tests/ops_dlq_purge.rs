//! `oncehookctl dlq purge` end to end through the real binaries: exactly
//! the chosen dead letters go, the rest keep their order, and nothing goes
//! without `--yes`.

use oncehook_e2e::ops::{ctl_json, ctl_ok, dead_queue, dlq_list, ids, wait_dead};
use oncehook_e2e::{PipelineSpec, TestEnv, broker};

#[tokio::test]
async fn dlq_purge_removes_exactly_the_chosen_dead_letters() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    for n in 1..=3 {
        let d = env.captured(
            &format!("order_p{n}"),
            &format!("pay_P{n}"),
            &format!("evt_P{n}"),
        );
        env.post_ok(&app.url, "razorpay", &d).await;
    }
    wait_dead(&env, 3).await;
    let all = ids(&dlq_list(&env, &[]).await);
    assert_eq!(all.len(), 3);

    // Without --yes and without a terminal to ask on: refused, nothing gone.
    let (code, stdout, stderr) = env.ctl(&["dlq", "purge", &all[1]]).await;
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert!(
        stdout.contains(&all[1]),
        "shows what would be purged: {stdout}"
    );
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(3));

    let out = ctl_ok(&env, &["dlq", "purge", &all[1], "--yes"]).await;
    assert!(out.contains("purged 1 dead letter(s)"), "{out}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));
    assert_eq!(
        ids(&dlq_list(&env, &[]).await),
        vec![all[0].clone(), all[2].clone()],
        "exactly that one is gone; the rest keep their order"
    );

    let (code, _, stderr) = env.ctl(&["dlq", "purge", "ffffffffffff", "--yes"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("ffffffffffff"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));

    let (code, _, stderr) = env.ctl(&["dlq", "purge", "--all"]).await;
    assert_ne!(code, 0, "--all without --yes is refused too");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));

    let out = ctl_json(&env, &["dlq", "purge", "--all", "--yes"]).await;
    assert_eq!(out["purged"], 2);
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
}
