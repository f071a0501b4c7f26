use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").broker;
    assert_eq!(c.nodes.all()[0].url().expose(), DEFAULT_AMQP_URL);
    assert_eq!(c.prefix, "oncehook");
    assert_eq!(c.publish_timeout, Duration::from_secs(3));
    assert_eq!((c.delivery_limit, c.quorum_initial_group_size), (5, 3));
}

#[test]
fn a_bad_url_is_refused_without_printing_it() {
    let text = refused_env(&[(ENV_AMQP_URL, "http://user:p@ss@broker/")]);
    assert!(text.contains(ENV_AMQP_URL), "{text}");
    assert!(!text.contains("p@ss") && !text.contains("user"), "{text}");
    // A password with `@` in a good URL is kept whole and never shown by Debug.
    let config = load_env(&[(ENV_AMQP_URL, "amqp://user:p@ss@broker:5672/%2f")]).expect("valid");
    assert_eq!(
        config.broker.nodes.all()[0].url().expose(),
        "amqp://user:p@ss@broker:5672/%2f"
    );
    assert!(!format!("{config:?}").contains("p@ss"));
}

#[test]
fn the_broker_url_may_list_the_nodes_of_a_cluster() {
    let three = "amqp://app:s3cret@rabbit-0:5672/%2f,amqp://app:s3cret@rabbit-1:5672/%2f,amqp://app:s3cret@rabbit-2:5672/%2f";
    let c = load_env(&[(ENV_AMQP_URL, three)]).expect("three nodes");
    assert_eq!(c.broker.nodes.len(), 3);
    assert_eq!(
        c.broker.nodes.labels(),
        "rabbit-0:5672, rabbit-1:5672, rabbit-2:5672"
    );
    assert_eq!(c.broker.quorum_initial_group_size, 3, "default");
    assert!(!format!("{c:?}").contains("s3cret"));

    // A bad entry is named (position and variable), its text is not.
    let text = refused_env(&[(
        ENV_AMQP_URL,
        "amqp://app:s3cret@rabbit-0:5672/%2f,amqp//app:s3cret@rabbit-1:5672",
    )]);
    assert!(
        text.contains(ENV_AMQP_URL) && text.contains("broker.url") && text.contains("entry 2 of 2"),
        "{text}"
    );
    assert!(!text.contains("s3cret") && !text.contains("app"), "{text}");
}

#[test]
fn a_url_of_the_wrong_type_in_the_file_is_not_echoed() {
    let text = refused("[broker]\nurl = [\"amqp://app:s3cret@rabbit-0/\"]\n", &[]);
    assert!(
        text.contains("broker.url") && text.contains("found a list"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn the_quorum_group_size_is_read_and_at_least_one() {
    let c = load("[broker]\nquorum_initial_group_size = 5\n", &[]).expect("file");
    assert_eq!(c.broker.queue_settings().initial_group_size, 5);
    let text = refused_env(&[(ENV_QUORUM_INITIAL_GROUP_SIZE, "0")]);
    assert!(text.contains(ENV_QUORUM_INITIAL_GROUP_SIZE), "{text}");
}

#[test]
fn the_prefix_must_not_be_blank() {
    let text = refused("[broker]\nprefix = \"  \"\n", &[]);
    assert!(
        text.contains("broker.prefix") && text.contains(ENV_AMQP_PREFIX),
        "{text}"
    );
}

#[test]
fn timeouts_and_limits_come_from_the_environment_as_numbers() {
    let c = load_env(&[(ENV_PUBLISH_TIMEOUT_MS, "250"), (ENV_DELIVERY_LIMIT, "9")])
        .expect("numbers as text");
    assert_eq!(c.broker.publish_timeout, Duration::from_millis(250));
    assert_eq!(c.broker.delivery_limit, 9);
    let text = refused_env(&[(ENV_DELIVERY_LIMIT, "many")]);
    assert!(
        text.contains("broker.delivery_limit (ONCEHOOK_DELIVERY_LIMIT)") && text.contains("many"),
        "{text}"
    );
}
