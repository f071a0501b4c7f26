use super::*;
use crate::model::ItemIn;

fn order_in() -> OrderCreate {
    OrderCreate {
        order_ref: "order_1".into(),
        customer_email: "a@shop.example".into(),
        currency: "INR".into(),
        amount_minor: 1500,
        items: vec![
            ItemIn {
                sku: "tee".into(),
                qty: 2,
                unit_minor: 500,
            },
            ItemIn {
                sku: "cap".into(),
                qty: 1,
                unit_minor: 500,
            },
        ],
        gateway_refs: [("razorpay".to_owned(), "order_Abc".to_owned())].into(),
        metadata: None,
    }
}

fn field(o: &OrderCreate) -> Option<String> {
    order(o, 10).err().and_then(|e| e.field)
}

#[test]
fn a_good_order_is_accepted_with_its_items_by_sku() {
    let o = order(&order_in(), 10).expect("valid");
    assert_eq!(o.items[0].sku, "cap");
    assert_eq!(o.metadata, serde_json::json!({}));
    assert_eq!(o.gateway_refs[0].gateway, "razorpay");
}

#[test]
fn each_fault_names_its_field() {
    let mut o = order_in();
    o.amount_minor = 1400;
    assert_eq!(field(&o).as_deref(), Some("amount_minor"));
    let mut o = order_in();
    o.currency = "XYZ".into();
    assert_eq!(field(&o).as_deref(), Some("currency"));
    let mut o = order_in();
    o.customer_email = "not an email".into();
    assert_eq!(field(&o).as_deref(), Some("customer_email"));
    let mut o = order_in();
    o.items[1].qty = 0;
    assert_eq!(field(&o).as_deref(), Some("items[1].qty"));
    let mut o = order_in();
    o.items[1].sku = "tee".into();
    assert_eq!(field(&o).as_deref(), Some("items[1].sku"));
    let mut o = order_in();
    o.items.clear();
    assert_eq!(field(&o).as_deref(), Some("items"));
    let mut o = order_in();
    o.gateway_refs = [("paypal".to_owned(), "x".to_owned())].into();
    assert_eq!(field(&o).as_deref(), Some("gateway_refs.paypal"));
    let mut o = order_in();
    o.metadata = Some(serde_json::json!([1]));
    assert_eq!(field(&o).as_deref(), Some("metadata"));
    let mut o = order_in();
    o.order_ref = "has space".into();
    assert_eq!(field(&o).as_deref(), Some("order_ref"));
    let mut o = order_in();
    o.items[0].unit_minor = i64::MAX;
    assert!(field(&o).is_some());
}

#[test]
fn emails() {
    for ok in ["a@b.co", "first.last+tag@shop.example"] {
        assert!(email(ok), "{ok}");
    }
    for bad in [
        "", "a", "a@", "@b.co", "a@b", "a b@c.de", "a@@b.co", "a@b..co",
    ] {
        assert!(!email(bad), "{bad}");
    }
}
