//! `manifest!` on tests/shop/manifest.toml: the generated names, types and
//! handler trait, dispatched natively.

use std::num::NonZeroU64;

use extension_guest::testing::TestHost;
use extension_guest::{ActionError, Host, documents};
use serde::{Deserialize, Serialize};
use serde_json::json;

extension_guest_macros::manifest!("tests/shop/manifest.toml");

use manifest::{Actions, OrdersAddInput, OrdersAddOutput, TypeInput};

struct Shop;

#[derive(PartialEq, Serialize, Deserialize)]
struct Orders {
    count: u64,
}

impl Actions for Shop {
    fn orders_add<H: Host + ?Sized>(
        host: &H,
        input: OrdersAddInput,
    ) -> Result<OrdersAddOutput, ActionError> {
        // The generated types: a `pattern` string, a bounded integer, an
        // optional field.
        let sku: &str = &input.sku;
        let quantity: NonZeroU64 = input.quantity;
        assert!(input.note.is_none() || sku.starts_with("ABC"));
        let orders = documents::update(host, "orders", sku, 3, |current: Option<&Orders>| {
            Ok(Orders {
                count: current.map_or(0, |o| o.count) + quantity.get(),
            })
        })?;
        Ok(OrdersAddOutput {
            orders: orders.value.count,
        })
    }

    fn r#type<H: Host + ?Sized>(
        _host: &H,
        _input: TypeInput,
    ) -> Result<serde_json::Value, ActionError> {
        Ok(json!("shop"))
    }
}

fn run(action: &str, input: serde_json::Value) -> Result<serde_json::Value, ActionError> {
    let host = TestHost::new("p1");
    manifest::dispatch::<Shop>(&host, action, &input.to_string())
        .map(|output| serde_json::from_str(&output).unwrap())
}

#[test]
fn the_manifest_s_actions_dispatch_to_their_typed_handlers() {
    assert_eq!(manifest::ACTIONS, ["shop.orders.add", "shop.type"]);
    assert_eq!(manifest::ORDERS_ADD, "shop.orders.add");
    let host = TestHost::new("p1");
    for expected in [2, 5] {
        let added = manifest::dispatch::<Shop>(
            &host,
            manifest::ORDERS_ADD,
            &json!({ "sku": "ABC-1", "quantity": if expected == 2 { 2 } else { 3 } }).to_string(),
        )
        .unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&added).unwrap(),
            json!({ "orders": expected })
        );
    }
    assert_eq!(run(manifest::TYPE, json!({})).unwrap(), json!("shop"));
}

#[test]
fn the_generated_types_check_the_schema_s_rules_and_name_the_field() {
    for (input, message) in [
        (
            json!({ "sku": "abc", "quantity": 1 }),
            "sku: doesn't match pattern",
        ),
        (json!({ "sku": "ABC-1", "quantity": 0 }), "quantity: "),
        (json!({ "sku": "ABC-1" }), "input: missing field `quantity`"),
        (
            json!({ "sku": "ABC-1", "quantity": 1, "colour": "red" }),
            "colour: unknown field `colour`",
        ),
        (
            json!({ "sku": "ABC-1", "quantity": 1, "note": "x".repeat(21) }),
            "note: longer than 20 characters",
        ),
    ] {
        let error = run(manifest::ORDERS_ADD, input.clone()).unwrap_err();
        assert_eq!(
            error.code,
            extension_guest::ErrorCode::InvalidInput,
            "{input}"
        );
        assert!(error.message.starts_with(message), "{input}: {error}");
    }
    let unknown = run(manifest::TYPE, json!({ "x": 1 })).unwrap_err();
    assert!(unknown.message.contains("unknown field `x`"), "{unknown}");
}
