/* The local-disk rename and rmdir loops of the job commit, without the GIL.
 *
 * A Python loop over os calls releases and retakes the GIL around every call: with the job
 * commit's 32 threads on 2 CPUs, those hand-offs (futex wake-ups and context switches) cost
 * more than the renames themselves. These loops take a whole batch of already-encoded
 * relative paths, release the GIL once, and make one system call per entry.
 *
 * Optional: built when a compiler is present (setup.py), otherwise LocalStore uses its
 * ctypes loop with the same behaviour. Linux only (renameat2, unlinkat).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_REMOVEDIR
#define AT_REMOVEDIR 0x200
#endif

static int
do_renameat2(int sfd, const char *src, int dfd, const char *dst, unsigned int flags)
{
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, sfd, src, dfd, dst, flags);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* Borrowed char pointers of a list of bytes; NULL (exception set) if any is not bytes or
 * holds a NUL (the kernel would read a shorter path than the caller meant). */
static const char **
paths_of(PyObject *list, Py_ssize_t n)
{
    const char **out = PyMem_Malloc(sizeof(char *) * (size_t)(n > 0 ? n : 1));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(item)) {
            PyMem_Free(out);
            PyErr_SetString(PyExc_TypeError, "paths must be bytes");
            return NULL;
        }
        const char *s = PyBytes_AS_STRING(item);
        if ((Py_ssize_t)strlen(s) != PyBytes_GET_SIZE(item)) {
            PyMem_Free(out);
            PyErr_SetString(PyExc_ValueError, "embedded NUL in a path");
            return NULL;
        }
        out[i] = s;
    }
    return out;
}

/* rename_run(src_dir_fd, srcs, dst_dir_fd, dsts, flags) -> (index, errno)
 * Renames srcs[i] (relative to src_dir_fd) to dsts[i] (relative to dst_dir_fd) in order and
 * stops at the first failure: returns how many succeeded and that failure's errno (0: all). */
static PyObject *
rename_run(PyObject *self, PyObject *args)
{
    (void)self;
    int sfd, dfd;
    unsigned int flags;
    PyObject *srcs, *dsts;
    if (!PyArg_ParseTuple(args, "iO!iO!I", &sfd, &PyList_Type, &srcs, &dfd, &PyList_Type,
                          &dsts, &flags))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(srcs);
    if (PyList_GET_SIZE(dsts) != n) {
        PyErr_SetString(PyExc_ValueError, "srcs and dsts differ in length");
        return NULL;
    }
    /* the lists keep the bytes alive; private copies keep the lists' contents fixed */
    PyObject *src_copy = PyList_GetSlice(srcs, 0, n);
    PyObject *dst_copy = PyList_GetSlice(dsts, 0, n);
    const char **s = NULL, **d = NULL;
    PyObject *result = NULL;
    if (src_copy == NULL || dst_copy == NULL)
        goto done;
    if ((s = paths_of(src_copy, n)) == NULL || (d = paths_of(dst_copy, n)) == NULL)
        goto done;
    Py_ssize_t i = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (do_renameat2(sfd, s[i], dfd, d[i], flags) != 0) {
            err = errno;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("ni", i, err);
done:
    PyMem_Free(s);
    PyMem_Free(d);
    Py_XDECREF(src_copy);
    Py_XDECREF(dst_copy);
    return result;
}

/* rmdir_run(dir_fd, paths) -> removed
 * Removes each directory of paths (relative to dir_fd) in order; one that is missing, not
 * empty or otherwise not removable is skipped. Returns how many were removed. */
static PyObject *
rmdir_run(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    PyObject *paths;
    if (!PyArg_ParseTuple(args, "iO!", &fd, &PyList_Type, &paths))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(paths);
    PyObject *copy = PyList_GetSlice(paths, 0, n);
    if (copy == NULL)
        return NULL;
    const char **p = paths_of(copy, n);
    if (p == NULL) {
        Py_DECREF(copy);
        return NULL;
    }
    Py_ssize_t removed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (unlinkat(fd, p[i], AT_REMOVEDIR) == 0)
            removed++;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(p);
    Py_DECREF(copy);
    return PyLong_FromSsize_t(removed);
}

static PyMethodDef methods[] = {
    {"rename_run", rename_run, METH_VARARGS,
     "rename_run(src_dir_fd, srcs, dst_dir_fd, dsts, flags) -> (renamed, errno)"},
    {"rmdir_run", rmdir_run, METH_VARARGS, "rmdir_run(dir_fd, paths) -> removed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "committer.store._native",
    .m_doc = "The local-disk rename and rmdir loops of the job commit, without the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
