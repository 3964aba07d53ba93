//! The interpreter: started once (or found running), `gpu_agent_policy`
//! injected, policy modules loaded from their files, exceptions written out
//! with their traceback.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::Once;

use pyo3::prelude::*;
use pyo3::types::PyList;

/// The source of `gpu_agent_policy`, the vocabulary module policies import,
/// NUL-terminated for Python's compiler.
const VOCABULARY: &CStr = {
    const SOURCE: &str = concat!(include_str!("gpu_agent_policy.py"), "\0");
    match CStr::from_bytes_with_nul(SOURCE.as_bytes()) {
        Ok(source) => source,
        Err(_) => panic!("gpu_agent_policy.py holds a NUL byte"),
    }
};

/// Readies the interpreter once per process: libpython's symbols made
/// global, the interpreter started unless the process already runs one
/// (then its `sys.stdout` stays as it is; in one the plugin started,
/// `print` goes to standard error, so that it never mixes into what
/// `gpuctl simulate` writes), and `gpu_agent_policy` in `sys.modules`.
fn ready() {
    static READY: Once = Once::new();
    READY.call_once(|| {
        expose_libpython();
        // SAFETY: a plain query, allowed before initialisation.
        let ours = unsafe { pyo3::ffi::Py_IsInitialized() } == 0;
        Python::initialize();
        Python::attach(|py| {
            let sys = py.import("sys")?;
            if ours {
                sys.setattr("stdout", sys.getattr("stderr")?)?;
            }
            PyModule::from_code(
                py,
                VOCABULARY,
                c"<gpu-agent>/gpu_agent_policy.py",
                c"gpu_agent_policy",
            )
            .map(drop)
        })
        .unwrap_or_else(|e| panic!("the built-in gpu_agent_policy module failed: {e}"));
    });
}

/// Makes libpython's symbols global in the process. The agent opens
/// plugins with `RTLD_LOCAL`, and so, with them, the libpython a plugin
/// needs; Python's own extension modules (`_decimal`, `_json`, ...) do not
/// link libpython but expect its symbols in the global scope, so without
/// this their import fails on an undefined symbol. Where the process itself
/// is Python, `dladdr` names the executable, already global.
fn expose_libpython() {
    // SAFETY: dladdr fills `info` for an address in a loaded object; the
    // name it gives stays valid while that object is loaded, which it is
    // (this plugin needs it). RTLD_NOLOAD opens nothing new, and the
    // handle is kept for good, as the library is.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let symbol = pyo3::ffi::Py_IsInitialized as *const libc::c_void;
        if libc::dladdr(symbol, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_GLOBAL | libc::RTLD_NOLOAD,
            );
        }
    }
}

/// Loads the policy module at `path` (UTF-8 Python source; as Python runs
/// a script, with its directory first on `sys.path`) and returns its
/// `on_event`. A file that cannot be read or imported, or that has no
/// `on_event`, is an error naming it (with the traceback of an import that
/// raised).
pub fn load(path: &str) -> Result<Py<PyAny>, String> {
    let source =
        std::fs::read_to_string(path).map_err(|e| format!("module: cannot read {path}: {e}"))?;
    let nul = |_| format!("module {path}: holds a NUL byte");
    let source = CString::new(source).map_err(nul)?;
    let file = CString::new(path).map_err(nul)?;
    let stem = Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("policy");
    // A name of its own, so that a file called json.py never stands in for
    // the standard library's json in sys.modules.
    let name = CString::new(format!("gpu_agent_policy_{stem}")).map_err(nul)?;
    let dir = Path::new(path)
        .parent()
        .and_then(|d| d.to_str())
        .filter(|d| !d.is_empty())
        .unwrap_or(".");
    ready();
    Python::attach(|py| {
        let fail = |e: PyErr| format!("module {path}: {}", describe(py, &e));
        let sys_path = py
            .import("sys")
            .and_then(|sys| sys.getattr("path"))
            .and_then(|p| p.cast_into::<PyList>().map_err(PyErr::from))
            .map_err(fail)?;
        if !sys_path.contains(dir).map_err(fail)? {
            sys_path.insert(0, dir).map_err(fail)?;
        }
        let module = PyModule::from_code(py, &source, &file, &name).map_err(fail)?;
        match module.getattr_opt("on_event").map_err(fail)? {
            Some(f) if f.is_callable() => Ok(f.unbind()),
            _ => Err(format!(
                "module {path}: defines no function on_event(view, event)"
            )),
        }
    })
}

/// A Python exception in words: its traceback as Python prints it (for an
/// exception without one, its type and message).
pub fn describe(py: Python<'_>, error: &PyErr) -> String {
    let formatted = py.import("traceback").and_then(|tb| {
        let lines = tb.call_method1(
            "format_exception",
            (error.get_type(py), error.value(py), error.traceback(py)),
        )?;
        "".into_pyobject(py)?
            .call_method1("join", (lines,))?
            .extract::<String>()
    });
    match formatted {
        Ok(text) => text.trim_end().to_string(),
        Err(_) => error.to_string(),
    }
}
