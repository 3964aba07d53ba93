//! Test fixture: the root module of a plugin built against plugin API 0.0.1,
//! whose layout predates today's. The agent must refuse it and say why.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use abi_stable::{
    declare_root_module_statics, export_root_module, library::RootModule, package_version_strings,
    prefix_type::PrefixTypeTrait, sabi_types::VersionStrings, std_types::RStr, StableAbi,
};

/// The old root module: a name and nothing else.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = OldPolicyModRef)))]
#[sabi(missing_field(panic))]
pub struct OldPolicyMod {
    /// Policy name.
    #[sabi(last_prefix_field)]
    pub name: RStr<'static>,
}

impl RootModule for OldPolicyModRef {
    declare_root_module_statics! {OldPolicyModRef}
    const BASE_NAME: &'static str = "gpu_agent_policy";
    const NAME: &'static str = "gpu_agent_policy";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Exports the old root module.
#[export_root_module]
pub fn policy_module() -> OldPolicyModRef {
    OldPolicyMod {
        name: RStr::from_str("old"),
    }
    .leak_into_prefix()
}
