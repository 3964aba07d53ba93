//! Strict method arguments: a call whose arguments are not exactly what a
//! method takes (a wrong type, one too many, one missing) is answered
//! `org.freedesktop.DBus.Error.InvalidArgs`, naming the signature expected
//! and the one that came.
//!
//! zbus checks the body of a call against the method's argument types, but
//! answers a mismatch with its own `org.freedesktop.zbus.Error`. So a method
//! takes its one argument as [`Arg<T>`] (which accepts any body, and says
//! which it got) and answers with a [`CallError`]. A method without arguments takes the call's
//! header, which makes zbus check that the body is empty; zbus refuses
//! arguments there before the method sees the call, so that refusal stays
//! zbus's own `org.freedesktop.zbus.Error` ("Signature mismatch").

use std::marker::PhantomData;

use serde::de::{Deserialize, DeserializeSeed, Deserializer};
use zbus::message::Header;
use zbus::names::ErrorName;
use zbus::zvariant::{DynamicDeserialize, DynamicType, Signature, Type};

use crate::AgentError;

/// A method's argument of type `T`, or the signature of the body that came
/// instead. Introspection shows `T`'s signature.
#[derive(Debug)]
pub struct Arg<T>(Result<T, Signature>);

impl<T: Type> Arg<T> {
    /// The argument, or `InvalidArgs` naming the expected and given signatures.
    pub fn get(self) -> Result<T, CallError> {
        self.0.map_err(|got| {
            CallError::Bus(zbus::fdo::Error::InvalidArgs(format!(
                "expected ({}), got ({})",
                T::SIGNATURE.to_string_no_parens(),
                got.to_string_no_parens()
            )))
        })
    }
}

/// What a method taking [`Arg`]s answers: one of ours, or a standard
/// `org.freedesktop.DBus.Error` (`InvalidArgs`) under its own name.
#[derive(Debug)]
pub enum CallError {
    /// An `org.gpuagent.Agent1.Error`.
    Agent(AgentError),
    /// An `org.freedesktop.DBus.Error`.
    Bus(zbus::fdo::Error),
}

impl From<AgentError> for CallError {
    fn from(e: AgentError) -> CallError {
        CallError::Agent(e)
    }
}

impl From<zbus::Error> for CallError {
    fn from(e: zbus::Error) -> CallError {
        CallError::Agent(e.into())
    }
}

impl zbus::DBusError for CallError {
    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<zbus::Message> {
        match self {
            CallError::Agent(e) => e.create_reply(call),
            CallError::Bus(e) => e.create_reply(call),
        }
    }

    fn name(&self) -> ErrorName<'_> {
        match self {
            CallError::Agent(e) => e.name(),
            CallError::Bus(e) => e.name(),
        }
    }

    fn description(&self) -> Option<&str> {
        match self {
            CallError::Agent(e) => e.description(),
            CallError::Bus(e) => e.description(),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Agent(e) => e.fmt(f),
            CallError::Bus(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CallError {}

impl<T: Type> Type for Arg<T> {
    const SIGNATURE: &'static Signature = T::SIGNATURE;
}

/// The seed of an [`Arg`]: `T` when the body is `T`, else nothing is read.
pub struct ArgSeed<T> {
    got: Option<Signature>,
    _t: PhantomData<T>,
}

impl<T: Type> DynamicType for ArgSeed<T> {
    fn signature(&self) -> Signature {
        self.got.clone().unwrap_or_else(|| T::SIGNATURE.clone())
    }
}

impl<'de, T: Type + Deserialize<'de>> DeserializeSeed<'de> for ArgSeed<T> {
    type Value = Arg<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Arg<T>, D::Error> {
        match self.got {
            Some(got) => Ok(Arg(Err(got))),
            None => T::deserialize(d).map(|t| Arg(Ok(t))),
        }
    }
}

impl<'de, T: Type + Deserialize<'de>> DynamicDeserialize<'de> for Arg<T> {
    type Deserializer = ArgSeed<T>;

    fn deserializer_for_signature(signature: &Signature) -> zbus::zvariant::Result<ArgSeed<T>> {
        Ok(ArgSeed {
            got: (signature != T::SIGNATURE).then(|| signature.clone()),
            _t: PhantomData,
        })
    }
}
