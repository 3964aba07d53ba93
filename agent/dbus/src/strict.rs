//! Strict method arguments: a call whose arguments are not exactly those of
//! the method (a wrong type, one too many, one missing, or any argument to a
//! method that takes none) is answered
//! `org.freedesktop.DBus.Error.InvalidArgs`, naming the signature expected and
//! the one that came (`expected (s), got (u)`).
//!
//! zbus checks a call's body against the method's argument types only while
//! it reads them, answers a mismatch with its own `org.freedesktop.zbus.Error`,
//! and reads nothing for a method without arguments (so it takes any). An
//! interface served as [`Strict`] checks every call first, against the input
//! signatures of the interface's own introspection, so the methods themselves
//! take plain types.
//!
//! The standard interfaces zbus serves with every object answer such calls
//! with `org.freedesktop.zbus.Error` too. Two of them are public in zbus 5
//! (`fdo::Properties`, `fdo::ObjectManager`) and are served strictly here:
//! the object manager as `Strict<ObjectManager>`, and each object's
//! `Properties` replaced by a strict one ([`serve_strict_properties`]), which
//! also refuses an interface name that is not one. `Introspectable` and
//! `Peer` are crate-private in zbus 5 (`pub(crate) struct` in its
//! `fdo/introspectable.rs` and `fdo/peer.rs`, 5.19), so they cannot be
//! wrapped: `Introspect` with an argument still answers
//! `org.freedesktop.zbus.Error` (`Signature mismatch: got u, expected`),
//! as zbus's interface macro maps a body it cannot read to
//! `fdo::Error::ZBus`; and the nodes zbus adds
//! between objects (a path's parents, which hold only the standard
//! interfaces) keep zbus's `Properties`, which removing would take away
//! with the node.
//!
//! zbus calls its `Interface` trait unstable across minor versions (5.15
//! changed it); [`Strict`] only delegates, except for the check, so such a
//! change fails to build here rather than misbehaving at run time.

use std::collections::HashMap;
use std::fmt::Write;
use std::ops::Deref;

use async_trait::async_trait;
use zbus::message::{Header, Message};
use zbus::names::{InterfaceName, MemberName};
use zbus::object_server::{DispatchResult2, Interface, SignalEmitter};
use zbus::zvariant::Structure;
use zbus::zvariant::{OwnedValue, Value};
use zbus::{fdo, Connection, ObjectServer};
use zbus_xml::{ArgDirection, Node};

/// Interface `I`, with every method call's arguments checked before `I` sees
/// it. Derefs to `I`.
#[derive(Debug)]
pub struct Strict<I> {
    inner: I,
    /// Each method's input signature, its arguments' types in order.
    inputs: HashMap<String, String>,
}

impl<I: Interface> Strict<I> {
    /// `inner`, served strictly.
    pub fn new(inner: I) -> Strict<I> {
        let inputs = input_signatures(&inner);
        Strict { inner, inputs }
    }

    /// The call's error when `msg`'s body is not what method `member` takes.
    fn mismatch(&self, member: &str, msg: &Message) -> Option<fdo::Error> {
        let expected = self.inputs.get(member)?;
        let got = msg.body().signature().to_string_no_parens();
        if got != *expected {
            return Some(fdo::Error::InvalidArgs(format!(
                "expected ({expected}), got ({got})"
            )));
        }
        (I::name() == fdo::Properties::name())
            .then(|| bad_interface_name(msg))
            .flatten()
    }
}

/// A `Properties` call's error when its first argument, an interface's
/// name, is not one (zbus would answer `org.freedesktop.zbus.Error` reading
/// it).
fn bad_interface_name(msg: &Message) -> Option<fdo::Error> {
    let body = msg.body();
    let fields: Structure<'_> = body.deserialize().ok()?;
    let name = <&str>::try_from(fields.fields().first()?).ok()?;
    InterfaceName::try_from(name)
        .err()
        .map(|e| fdo::Error::InvalidArgs(format!("{name:?} is not an interface name: {e}")))
}

/// Serves object `path`'s `org.freedesktop.DBus.Properties` strictly, in
/// place of the one zbus adds to every object (see the module
/// documentation). `path` must hold an interface of its own: a path with
/// only the standard interfaces is no object, and would go with them.
/// Its object manager, if any, announces the swap (`InterfacesRemoved` and
/// `InterfacesAdded` of `Properties` alone).
pub async fn serve_strict_properties(server: &ObjectServer, path: &str) -> zbus::Result<()> {
    server.remove::<fdo::Properties, _>(path).await?;
    server.at(path, Strict::new(fdo::Properties)).await?;
    Ok(())
}

/// The input signature of every method `iface` introspects.
fn input_signatures<I: Interface>(iface: &I) -> HashMap<String, String> {
    let mut xml = String::from("<node>");
    iface.introspect_to_writer(&mut xml, 0);
    xml.push_str("</node>");
    let node = Node::from_reader(xml.as_bytes())
        .unwrap_or_else(|e| panic!("zbus's introspection of {} does not parse: {e}", I::name()));
    node.interfaces()
        .iter()
        .flat_map(|i| i.methods())
        .map(|m| {
            let signature = m
                .args()
                .iter()
                .filter(|a| a.direction() != Some(ArgDirection::Out))
                .fold(String::new(), |mut s, a| {
                    write!(s, "{}", a.ty().inner()).expect("writing to a String");
                    s
                });
            (m.name().to_string(), signature)
        })
        .collect()
}

impl<I> Deref for Strict<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.inner
    }
}

#[async_trait]
impl<I: Interface> Interface for Strict<I> {
    fn name() -> InterfaceName<'static> {
        I::name()
    }

    fn spawn_tasks_for_methods(&self) -> bool {
        self.inner.spawn_tasks_for_methods()
    }

    async fn get(
        &self,
        property_name: &str,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> Option<fdo::Result<OwnedValue>> {
        self.inner
            .get(property_name, server, connection, header, emitter)
            .await
    }

    async fn get_all(
        &self,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> fdo::Result<HashMap<String, OwnedValue>> {
        self.inner
            .get_all(server, connection, header, emitter)
            .await
    }

    fn set<'call>(
        &'call self,
        property_name: &'call str,
        value: &'call Value<'_>,
        server: &'call ObjectServer,
        connection: &'call Connection,
        header: Option<&'call Header<'_>>,
        emitter: &'call SignalEmitter<'_>,
    ) -> DispatchResult2<'call> {
        self.inner
            .set(property_name, value, server, connection, header, emitter)
    }

    async fn set_mut(
        &mut self,
        property_name: &str,
        value: &Value<'_>,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> Option<fdo::Result<()>> {
        self.inner
            .set_mut(property_name, value, server, connection, header, emitter)
            .await
    }

    fn call<'call>(
        &'call self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult2<'call> {
        match self.mismatch(name.as_str(), msg) {
            Some(err) => {
                DispatchResult2::new_async(connection, msg, async move { Err::<(), _>(err) })
            }
            None => self.inner.call(server, connection, msg, name),
        }
    }

    fn call_mut<'call>(
        &'call mut self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult2<'call> {
        // `call` has checked the arguments: zbus calls this only after it.
        self.inner.call_mut(server, connection, msg, name)
    }

    fn introspect_to_writer(&self, writer: &mut dyn std::fmt::Write, level: usize) {
        self.inner.introspect_to_writer(writer, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::interface;

    struct Probe;

    #[interface(name = "org.gpuagent.Probe")]
    impl Probe {
        async fn none(&self) {}
        async fn two(&self, _gpu: u32, _name: String) -> String {
            String::new()
        }
        async fn special(&self, #[zbus(header)] _header: Header<'_>, _spec: Vec<u8>) -> u32 {
            0
        }
        #[zbus(property)]
        async fn level(&self) -> u32 {
            0
        }
    }

    #[test]
    fn zbus_s_properties_and_object_manager_introspect_their_inputs() {
        let expected = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(m, s)| (m.to_string(), s.to_string()))
                .collect()
        };
        assert_eq!(
            input_signatures(&fdo::Properties),
            expected(&[("Get", "ss"), ("Set", "ssv"), ("GetAll", "s")])
        );
        assert_eq!(
            input_signatures(&fdo::ObjectManager),
            expected(&[("GetManagedObjects", "")])
        );
    }

    #[test]
    fn a_properties_call_naming_no_interface_is_refused_by_name() {
        let get = |body: &(&str, &str)| {
            Message::method_call("/org/gpuagent/Agent1", "Get")
                .unwrap()
                .interface("org.freedesktop.DBus.Properties")
                .unwrap()
                .build(body)
                .unwrap()
        };
        let get_all = |name: &str| {
            Message::method_call("/org/gpuagent/Agent1", "GetAll")
                .unwrap()
                .interface("org.freedesktop.DBus.Properties")
                .unwrap()
                .build(&(name,))
                .unwrap()
        };
        assert!(bad_interface_name(&get(&("org.gpuagent.Device1", "Name"))).is_none());
        assert!(bad_interface_name(&get_all("x.y")).is_none());
        for name in ["x", "", "1.2", "a..b"] {
            match bad_interface_name(&get_all(name)) {
                Some(fdo::Error::InvalidArgs(m)) => {
                    assert!(
                        m.starts_with(&format!("{name:?} is not an interface name")),
                        "{m}"
                    )
                }
                other => panic!("{name:?}: {other:?}"),
            }
        }
        assert!(matches!(
            bad_interface_name(&get(&("Device1", "Name"))),
            Some(fdo::Error::InvalidArgs(_))
        ));
    }

    #[test]
    fn each_method_s_input_signature_leaves_out_outputs_and_zbus_s_own_arguments() {
        let inputs = input_signatures(&Probe);
        let expected: HashMap<String, String> = [("None", ""), ("Two", "us"), ("Special", "ay")]
            .into_iter()
            .map(|(m, s)| (m.to_string(), s.to_string()))
            .collect();
        assert_eq!(inputs, expected);
    }
}
