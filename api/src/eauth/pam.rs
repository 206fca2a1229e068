//! The `pam` eauth backend: a login is checked by Linux-PAM, as Salt's `salt.auth.pam`
//! checks it (`pam_authenticate`, then `pam_acct_mgmt`, for the service
//! `auth.pam.service`, default `login`).
//!
//! libpam is opened at run time (`dlopen` of `libpam.so.0`, through `libloading`), so
//! building Halite needs no PAM development files and a host without libpam fails the
//! login with a clear reason in the log instead of failing to start.
//!
//! The conversation answers what PAM asks as Salt's does: a hidden prompt
//! (`PAM_PROMPT_ECHO_OFF`) with the password, a visible one (`PAM_PROMPT_ECHO_ON`) with
//! the user name, messages with nothing.
//!
//! `halite_pam_confdir` (Halite's own option, not Salt's) names a directory of PAM
//! service files read instead of `/etc/pam.d` (Linux-PAM 1.4's `pam_start_confdir`):
//! tests use it to run real PAM stacks without touching the host's configuration.
//!
//! Groups: a user's system groups (`getgrouplist`) select the `GROUP%` entries of
//! `external_auth: pam:` (see [`groups`]).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::OnceLock;

use super::Denied;

const PAM_SUCCESS: c_int = 0;
const PAM_BUF_ERR: c_int = 5;
const PAM_CONV_ERR: c_int = 19;
const PAM_PROMPT_ECHO_OFF: c_int = 1;
const PAM_PROMPT_ECHO_ON: c_int = 2;
/// Linux-PAM's bound on the number of messages in one conversation call.
const PAM_MAX_NUM_MSG: c_int = 32;

#[repr(C)]
struct PamMessage {
    msg_style: c_int,
    msg: *const c_char,
}

#[repr(C)]
struct PamResponse {
    resp: *mut c_char,
    resp_retcode: c_int,
}

type ConvFn = unsafe extern "C" fn(c_int, *mut *const PamMessage, *mut *mut PamResponse, *mut c_void) -> c_int;

#[repr(C)]
struct PamConv {
    conv: ConvFn,
    appdata_ptr: *mut c_void,
}

type StartFn = unsafe extern "C" fn(*const c_char, *const c_char, *const PamConv, *mut *mut c_void) -> c_int;
type StartConfdirFn = unsafe extern "C" fn(*const c_char, *const c_char, *const PamConv, *const c_char, *mut *mut c_void) -> c_int;
type HandleFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// libpam's entry points, resolved once.
struct Lib {
    start: StartFn,
    start_confdir: Option<StartConfdirFn>,
    authenticate: HandleFn,
    acct_mgmt: HandleFn,
    end: HandleFn,
    _lib: libloading::Library,
}

fn lib() -> Result<&'static Lib, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: loading libpam runs its (trusted, system) initialisers only.
        let l = unsafe { libloading::Library::new("libpam.so.0") }.map_err(|e| format!("cannot load libpam.so.0: {e}"))?;
        // SAFETY: the symbols are Linux-PAM's, with the C signatures declared above.
        unsafe {
            let start = *l.get::<StartFn>(b"pam_start\0").map_err(|e| e.to_string())?;
            let start_confdir = l.get::<StartConfdirFn>(b"pam_start_confdir\0").ok().map(|s| *s);
            let authenticate = *l.get::<HandleFn>(b"pam_authenticate\0").map_err(|e| e.to_string())?;
            let acct_mgmt = *l.get::<HandleFn>(b"pam_acct_mgmt\0").map_err(|e| e.to_string())?;
            let end = *l.get::<HandleFn>(b"pam_end\0").map_err(|e| e.to_string())?;
            Ok(Lib { start, start_confdir, authenticate, acct_mgmt, end, _lib: l })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// What the conversation answers with.
struct Creds {
    user: CString,
    password: CString,
}

/// The conversation function PAM calls: one response per message, each allocated with
/// `malloc` (PAM frees them).
unsafe extern "C" fn converse(n: c_int, msgs: *mut *const PamMessage, resp: *mut *mut PamResponse, appdata: *mut c_void) -> c_int {
    if n <= 0 || n > PAM_MAX_NUM_MSG || msgs.is_null() || resp.is_null() || appdata.is_null() {
        return PAM_CONV_ERR;
    }
    // SAFETY: appdata is the `Creds` `check` passed, alive for the whole transaction.
    let creds = unsafe { &*(appdata as *const Creds) };
    // SAFETY: calloc of n zeroed responses; checked for NULL.
    let out = unsafe { libc::calloc(n as usize, std::mem::size_of::<PamResponse>()) } as *mut PamResponse;
    if out.is_null() {
        return PAM_BUF_ERR;
    }
    for i in 0..n as usize {
        // SAFETY: Linux-PAM passes an array of n message pointers.
        let m = unsafe { *msgs.add(i) };
        if m.is_null() {
            continue;
        }
        // SAFETY: m points to a message PAM owns for this call.
        let answer = match unsafe { (*m).msg_style } {
            PAM_PROMPT_ECHO_OFF => Some(&creds.password),
            PAM_PROMPT_ECHO_ON => Some(&creds.user),
            _ => None,
        };
        if let Some(a) = answer {
            // SAFETY: strdup of a NUL-terminated string; out has n entries.
            let dup = unsafe { libc::strdup(a.as_ptr()) };
            if dup.is_null() {
                for j in 0..i {
                    // SAFETY: entries before i were filled by strdup or are NULL.
                    unsafe { libc::free((*out.add(j)).resp as *mut c_void) };
                }
                // SAFETY: out came from calloc.
                unsafe { libc::free(out as *mut c_void) };
                return PAM_BUF_ERR;
            }
            // SAFETY: i < n.
            unsafe { (*out.add(i)).resp = dup };
        }
    }
    // SAFETY: resp is PAM's out pointer.
    unsafe { *resp = out };
    PAM_SUCCESS
}

/// Checks `user`/`password` with PAM `service`, its service files read from `confdir`
/// when given (else PAM's own place, `/etc/pam.d`).
pub fn check(service: &str, confdir: Option<&Path>, user: &str, password: &str) -> Result<(), Denied> {
    // A NUL cannot be passed to PAM: such credentials are wrong, not a fault.
    let (Ok(cuser), Ok(cpass)) = (CString::new(user), CString::new(password)) else {
        return Err(Denied::Credentials);
    };
    let cservice = CString::new(service).map_err(|_| Denied::Config("auth.pam.service holds a NUL byte".into()))?;
    let cdir = match confdir {
        Some(d) => Some(CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| Denied::Config("halite_pam_confdir holds a NUL byte".into()))?),
        None => None,
    };
    let l = lib().map_err(|e| Denied::Config(format!("eauth pam: {e}")))?;
    let creds = Box::new(Creds { user: cuser, password: cpass });
    let conv = PamConv { conv: converse, appdata_ptr: &*creds as *const Creds as *mut c_void };
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; conv and creds outlive the handle
    // (pam_end below runs before they drop).
    let rc = unsafe {
        match (&cdir, l.start_confdir) {
            (Some(d), Some(f)) => f(cservice.as_ptr(), creds.user.as_ptr(), &conv, d.as_ptr(), &mut h),
            (Some(_), None) => return Err(Denied::Config("halite_pam_confdir needs Linux-PAM 1.4 or later (pam_start_confdir)".into())),
            (None, _) => (l.start)(cservice.as_ptr(), creds.user.as_ptr(), &conv, &mut h),
        }
    };
    if rc != PAM_SUCCESS || h.is_null() {
        if !h.is_null() {
            // SAFETY: h came from pam_start.
            unsafe { (l.end)(h, rc) };
        }
        return Err(Denied::Config(format!("pam_start for service {service:?} failed ({rc})")));
    }
    // SAFETY: h is a live handle until pam_end.
    let mut rc = unsafe { (l.authenticate)(h, 0) };
    if rc == PAM_SUCCESS {
        // SAFETY: as above.
        rc = unsafe { (l.acct_mgmt)(h, 0) };
    }
    // SAFETY: ends the handle; nothing uses it after.
    unsafe { (l.end)(h, rc) };
    drop(creds);
    if rc == PAM_SUCCESS {
        Ok(())
    } else {
        Err(Denied::Credentials)
    }
}

/// The names of `user`'s system groups (its primary group and those listing it), as
/// Salt's `salt.utils.user.get_group_list`; empty for a user the system does not know.
pub fn groups(user: &str) -> Vec<String> {
    let Ok(cuser) = CString::new(user) else { return vec![] };
    let Some(pw) = passwd_gid(&cuser) else { return vec![] };
    let mut n: c_int = 64;
    loop {
        let mut gids: Vec<libc::gid_t> = vec![0; n as usize];
        let mut count = n;
        // SAFETY: gids has `count` entries; getgrouplist writes at most that many.
        let rc = unsafe { libc::getgrouplist(cuser.as_ptr(), pw, gids.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            gids.truncate(count.max(0) as usize);
            let mut names: Vec<String> = gids.into_iter().filter_map(group_name).collect();
            names.sort();
            names.dedup();
            return names;
        }
        if count <= n || count > 65536 {
            return vec![];
        }
        n = count;
    }
}

fn passwd_gid(user: &CStr) -> Option<libc::gid_t> {
    let mut buf = vec![0 as c_char; 16384];
    // SAFETY: a zeroed passwd is a valid out value for getpwnam_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for their lengths; res is set to &pwd or NULL.
    let rc = unsafe { libc::getpwnam_r(user.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut res) };
    (rc == 0 && !res.is_null()).then_some(pwd.pw_gid)
}

fn group_name(gid: libc::gid_t) -> Option<String> {
    let mut buf = vec![0 as c_char; 65536];
    // SAFETY: as in passwd_gid.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::group = std::ptr::null_mut();
    // SAFETY: buffers valid for their lengths.
    let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut res) };
    if rc != 0 || res.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: gr_name points into buf, NUL-terminated.
    Some(unsafe { CStr::from_ptr(grp.gr_name) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real PAM stack (pam_exec checking the password on stdin), read from a
    /// directory of our own through pam_start_confdir.
    #[test]
    fn a_real_pam_stack_decides() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("check.sh");
        std::fs::write(&script, "#!/bin/sh\npw=$(tr -d '\\000')\n[ \"$PAM_USER\" = alice ] && [ \"$pw\" = 'open sesame' ]\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(d.path().join("halite-test"), format!("auth required pam_exec.so expose_authtok quiet {}\naccount required pam_permit.so\n", script.display())).unwrap();
        let dir = Some(d.path());
        assert_eq!(check("halite-test", dir, "alice", "open sesame"), Ok(()));
        assert_eq!(check("halite-test", dir, "alice", "open sesame!"), Err(Denied::Credentials));
        assert_eq!(check("halite-test", dir, "bob", "open sesame"), Err(Denied::Credentials));
        assert_eq!(check("halite-test", dir, "alice", "nul\0inside"), Err(Denied::Credentials));
    }

    #[test]
    fn root_has_its_group() {
        assert!(groups("root").contains(&"root".to_string()));
        assert!(groups("no-such-user-halite").is_empty());
    }
}
