// pair_style mdband: see pair_mdband.h for the contract with the Python side.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pair_mdband.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "memory.h"
#include "neigh_list.h"
#include "neighbor.h"
#include "update.h"
#include "utils.h"

#include <mpi.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef MDBAND_LIBPYTHON
#define MDBAND_LIBPYTHON "libpython3.so"
#endif
#ifndef MDBAND_BRIDGE_MODULE
#define MDBAND_BRIDGE_MODULE "mdband.lammps.bridge"
#endif

using namespace LAMMPS_NS;

namespace {

constexpr double COINCIDENT_R2 = 1e-10;    // same as mdband.graph: drop coincident pairs (A^2)
constexpr int DEFAULT_CHUNK = 128;
constexpr double BOLTZ_METAL = 8.617343e-5;    // eV/K; deepmd-kit's energy factor is boltz / this

double wall_time()
{
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------------------------
// Embedded Python

// The interpreter that owns mdband: $MDBAND_PYTHON (set by the lammps.plugins entry point), else
// the first bin/python3 found above this shared object (it lives in <venv>/lib/pythonX.Y/
// site-packages/mdband_lammps_plugin/).
std::string python_executable()
{
  const char *env = std::getenv("MDBAND_PYTHON");
  if (env && *env) return env;
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&python_executable), &info) && info.dli_fname) {
    std::string dir = info.dli_fname;
    for (int up = 0; up < 8; ++up) {
      const size_t cut = dir.find_last_of('/');
      if (cut == std::string::npos || cut == 0) break;
      dir.resize(cut);
      for (const char *name : {"/bin/python3", "/bin/python"}) {
        const std::string candidate = dir + name;
        if (access(candidate.c_str(), X_OK) == 0) return candidate;
      }
    }
  }
  return "python3";
}

// Start Python when LAMMPS is the host process (the `lmp` executable). When LAMMPS runs inside
// Python (the `lammps` module), the running interpreter is used as it is.
bool start_python(std::string &why)
{
  if (Py_IsInitialized()) return true;
  // make libpython's symbols global so that extension modules (numpy, torch) resolve them
  const char *lib = std::getenv("MDBAND_LIBPYTHON");
  if (!lib || !*lib) lib = MDBAND_LIBPYTHON;
  if (!dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
    const char *err = dlerror();
    why = std::string("cannot load ") + lib + ": " + (err ? err : "?");
    return false;
  }
  const std::string exe = python_executable();
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;    // signals stay with LAMMPS and MPI
  config.parse_argv = 0;
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, exe.c_str());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    why = std::string("cannot initialise Python from ") + exe + ": " +
        (status.err_msg ? status.err_msg : "?");
    return false;
  }
  PyEval_SaveThread();    // every later call takes the GIL with PyGILState_Ensure
  return true;
}

// The pending Python exception as one line; the traceback is printed to stderr unless the
// error is one of mdband's own input errors (MdbandError), whose message is self-contained.
std::string python_error()
{
  if (!PyErr_Occurred()) return "unknown error (no Python exception set)";
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  bool user_error = false;
  PyObject *errors = PyImport_ImportModule("mdband.errors");
  if (errors) {
    PyObject *base = PyObject_GetAttrString(errors, "MdbandError");
    if (base) user_error = PyErr_GivenExceptionMatches(type, base);
    Py_XDECREF(base);
    Py_DECREF(errors);
  }
  PyErr_Clear();
  std::string msg;
  if (!user_error && type) {
    PyObject *name = PyObject_GetAttrString(type, "__name__");
    if (name && PyUnicode_Check(name)) msg = std::string(PyUnicode_AsUTF8(name)) + ": ";
    Py_XDECREF(name);
    PyErr_Clear();
  }
  PyObject *text = value ? PyObject_Str(value) : nullptr;
  if (text && PyUnicode_Check(text)) msg += PyUnicode_AsUTF8(text);
  Py_XDECREF(text);
  PyErr_Clear();
  if (user_error) {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  } else {
    PyErr_Restore(type, value, tb);
    PyErr_Print();
  }
  return msg;
}

// A memoryview over C++ memory; never built on a null pointer (empty vectors).
PyObject *view(void *data, size_t bytes, bool writable)
{
  static double empty[1];
  if (!data || bytes == 0) {
    data = empty;
    bytes = 0;
  }
  return PyMemoryView_FromMemory(static_cast<char *>(data), static_cast<Py_ssize_t>(bytes),
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

// ---------------------------------------------------------------------------------------------
// _mdband_lammps: the module through which Python reaches LAMMPS' communication

const char *CAPSULE_NAME = "mdband.PairMdband";

PyObject *py_exchange(PyObject *, PyObject *args)
{
  PyObject *capsule, *array;
  int reverse;
  if (!PyArg_ParseTuple(args, "OOp", &capsule, &array, &reverse)) return nullptr;
  auto *pair = static_cast<PairMdband *>(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
  if (!pair) return nullptr;
  Py_buffer buf;
  if (PyObject_GetBuffer(array, &buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
    return nullptr;
  if (buf.ndim != 2 || !buf.format || std::strcmp(buf.format, "d") != 0) {
    PyBuffer_Release(&buf);
    PyErr_SetString(PyExc_TypeError, "exchange needs a C-contiguous float64 (n_all, width) array");
    return nullptr;
  }
  const long nrows = static_cast<long>(buf.shape[0]);
  const int width = static_cast<int>(buf.shape[1]);
  double *rows = static_cast<double *>(buf.buf);
  Py_BEGIN_ALLOW_THREADS;
  pair->exchange_rows(rows, nrows, width, reverse != 0);
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&buf);
  Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"exchange", py_exchange, METH_VARARGS,
     "exchange(handle, rows, reverse): LAMMPS forward (owner -> ghost copy) or reverse "
     "(ghost -> owner sum) communication of per-atom rows"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_mdband_lammps", nullptr, -1, module_methods,
                          nullptr, nullptr, nullptr, nullptr};

// Put _mdband_lammps into sys.modules (once per interpreter); needs the GIL.
bool install_module()
{
  PyObject *modules = PyImport_GetModuleDict();    // borrowed
  if (PyDict_GetItemString(modules, "_mdband_lammps")) return true;
  PyObject *mod = PyModule_Create(&module_def);
  if (!mod) return false;
  const int rc = PyDict_SetItemString(modules, "_mdband_lammps", mod);
  Py_DECREF(mod);
  return rc == 0;
}

}    // namespace

// ---------------------------------------------------------------------------------------------

PairMdband::PairMdband(LAMMPS *lmp) : Pair(lmp)
{
  single_enable = 0;
  restartinfo = 1;    // as pair_style deepmd: nothing stored; read_restart marks a restart
  is_restart = false;
  ener_cvt = dist_cvt = force_cvt = 1.0;
  one_coeff = 1;
  manybody_flag = 1;
  reinitflag = 0;
  no_virial_fdotr_compute = 1;    // the virial comes from the edge gradients
  centroidstressflag = CENTROID_AVAIL;    // compute centroid/stress/atom: 9 components
  bridge = nullptr;
  cutoff = 0.0;
  chunk = DEFAULT_CHUNK;
  local_rank = 0;
  local_size = 1;
  comm_forward = comm_reverse = comm_reverse_off = chunk;
  comm_buf = nullptr;
  comm_stride = comm_offset = comm_width = 0;
  ncalls = 0;
  t_edges = t_python = t_post = 0.0;
  listed = list_sent = false;
  list_nall = -1;
  list_sends = 0;
  std::fill(out, out + 7, 0.0);
  out_freq = 100;
  out_atomic = 0;
  devi_trigger = 0;
  out_file = "model_devi.out";
  out_mode = "new";
  restart_rows = "repeat";
  last_devi_step = -1;
}

// Nothing is stored: the model is loaded again from the pair_style line an input gives after
// read_restart (LAMMPS then re-applies it to this object). A restored pair style continues
// its model-deviation file as pair_style deepmd does.
void PairMdband::write_restart(FILE *) {}

void PairMdband::read_restart(FILE *)
{
  is_restart = true;
}

PairMdband::~PairMdband()
{
  if (ncalls && std::getenv("MDBAND_TIMING")) {
    std::fprintf(stderr,
                 "mdband rank %d (%s): %ld calls; per call: edges %.3f ms, python %.3f ms, "
                 "forces %.3f ms; last step %zu edges; neighbour lists sent %ld\n",
                 comm->me, device_used.c_str(), ncalls, 1e3 * t_edges / ncalls,
                 1e3 * t_python / ncalls, 1e3 * t_post / ncalls, src.size(), list_sends);
  }
  if (bridge && Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_CLEAR(bridge);
    PyGILState_Release(gil);
  }
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

void PairMdband::allocate()
{
  allocated = 1;
  const int n = atom->ntypes + 1;
  memory->create(setflag, n, n, "pair:setflag");
  memory->create(cutsq, n, n, "pair:cutsq");
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) setflag[i][j] = 0;
}

// pair_style mdband MODEL [MODEL2 ...] [dtype float32|float64] [device cpu|cuda|auto]
//                   [head NAME] [charge Q] [spin S] [out_freq N] [out_file FILE] [atomic]
//                   [append|overwrite] [restart_rows repeat|continue]
// (charge_spin Q S, deepmd-kit's keyword, is the same as charge Q spin S)
void PairMdband::settings(int narg, char **arg)
{
  static const char *usage = "expected 'pair_style mdband MODEL [MODEL2 ...] [dtype "
                             "float32|float64] [device cpu|cuda|auto] [head NAME] [charge Q] "
                             "[spin S] [out_freq N] [out_file FILE] [atomic] [append|overwrite] "
                             "[restart_rows repeat|continue]'";
  const std::vector<std::string> valued = {"dtype",    "device",   "head",        "charge",
                                           "spin",     "out_freq", "out_file",    "charge_spin",
                                           "restart_rows"};
  const std::vector<std::string> flags = {"atomic", "append", "overwrite"};
  auto is_key = [&](const std::string &w) {
    return std::find(valued.begin(), valued.end(), w) != valued.end() ||
        std::find(flags.begin(), flags.end(), w) != flags.end();
  };
  model_files.clear();
  int k = 0;
  while (k < narg && !is_key(arg[k])) model_files.emplace_back(arg[k++]);
  if (model_files.empty()) error->all(FLERR, "Illegal pair_style mdband command: {}", usage);
  model_file = model_files[0];
  dtype = "float32";
  device = "auto";
  head.clear();
  charge.clear();
  spin.clear();
  out_freq = 100;
  out_file = "model_devi.out";
  out_atomic = 0;
  out_mode = "new";
  restart_rows = "repeat";
  last_devi_step = -1;
  bool committee_keys = false;
  for (; k < narg; k += 2) {
    const std::string key = arg[k];
    if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
      committee_keys = true;
      if (key == "atomic") {
        out_atomic = 1;
      } else {
        if (out_mode != "new" && out_mode != key)
          error->all(FLERR, "pair_style mdband: 'append' and 'overwrite' exclude each other");
        out_mode = key;
      }
      k -= 1;    // a flag takes no value
      continue;
    }
    if (!is_key(key))
      error->all(FLERR, "pair_style mdband: unknown keyword '{}' (model files come first; "
                 "keywords: dtype device head charge spin out_freq out_file atomic append "
                 "overwrite restart_rows)", key);
    if (k + 1 >= narg) error->all(FLERR, "pair_style mdband: keyword '{}' needs a value", key);
    const std::string value = arg[k + 1];
    if (key == "charge_spin") {    // deepmd-kit's form: two values
      if (k + 2 >= narg)
        error->all(FLERR, "pair_style mdband: charge_spin needs two values (charge, spin)");
      charge = value;
      spin = arg[k + 2];
      k += 1;
    } else if (key == "charge") {
      charge = value;
    } else if (key == "spin") {
      spin = value;
    } else if (key == "out_freq") {
      out_freq = utils::inumeric(FLERR, value, false, lmp);
      if (out_freq < 0) error->all(FLERR, "pair_style mdband: out_freq must be >= 0, not {}", value);
      committee_keys = true;
    } else if (key == "out_file") {
      out_file = value;
      committee_keys = true;
    } else if (key == "restart_rows") {
      if (value != "repeat" && value != "continue")
        error->all(FLERR, "pair_style mdband: restart_rows must be repeat or continue, not '{}'",
                   value);
      restart_rows = value;
      committee_keys = true;
    } else if (key == "dtype") {
      if (value != "float32" && value != "float64")
        error->all(FLERR, "pair_style mdband: dtype must be float32 or float64, not '{}'", value);
      dtype = value;
    } else if (key == "device") {
      if (value != "cpu" && value != "auto" && value.rfind("cuda", 0) != 0)
        error->all(FLERR, "pair_style mdband: device must be cpu, cuda, cuda:N or auto, not '{}'",
                   value);
      device = value;
    } else if (key == "head") {
      head = value;
    }
  }
  if (committee_keys && model_files.size() < 2)
    error->all(FLERR, "pair_style mdband: out_freq, out_file, atomic, append, overwrite and "
                      "restart_rows need two or more models (a committee)");
}

// pair_coeff * * [El1 El2 ...]: one element per LAMMPS type, or none (LAMMPS type t is the
// model's type t-1, as pair_style deepmd maps them)
void PairMdband::coeff(int narg, char **arg)
{
  const int ntypes = atom->ntypes;
  // (LAMMPS itself requires the '* *' of a pair style with one_coeff set)
  if (narg != 2 && narg != 2 + ntypes)
    error->all(FLERR, "pair_coeff for mdband must be 'pair_coeff * * El1 ... El{}' (one element "
               "per atom type) or 'pair_coeff * *' (the model's type map in order), got {} "
               "element(s)", ntypes, narg - 2);
  if (std::strcmp(update->unit_style, "lj") == 0)
    error->all(FLERR, "pair_style mdband does not support 'units lj'; use metal, real or any "
               "other physical unit style");
  ener_cvt = force->boltz / BOLTZ_METAL;
  dist_cvt = force->angstrom;
  force_cvt = ener_cvt / dist_cvt;
  elements.assign(arg + 2, arg + narg);

  // ranks sharing a node: GPU of this rank = local_rank % number of GPUs
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, comm->me, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);

  std::string why;
  std::string charge_spin_text;    // what the model takes of charge and spin ("" if nothing)
  int ok = start_python(why) ? 1 : 0;
  if (ok) {
    PyGILState_STATE gil = PyGILState_Ensure();
    const char *modname = std::getenv("MDBAND_BRIDGE_MODULE");
    if (!modname || !*modname) modname = MDBAND_BRIDGE_MODULE;
    PyObject *mod = PyImport_ImportModule(modname);
    PyObject *made = nullptr;
    if (!mod) {
      why = std::string("cannot import ") + modname + ": " + python_error();
    } else {
      const Py_ssize_t nel = static_cast<Py_ssize_t>(elements.size());
      PyObject *elist = PyList_New(nel);
      for (Py_ssize_t i = 0; i < nel; i++)
        PyList_SET_ITEM(elist, i, PyUnicode_FromString(elements[i].c_str()));
      PyObject *opts = Py_BuildValue(
          "{s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:s,s:i,s:i,s:s,s:L,s:i,s:i,s:s}", "dtype",
          dtype.c_str(), "device", device.c_str(), "head", head.c_str(), "charge", charge.c_str(),
          "spin", spin.c_str(), "rank", comm->me, "nprocs", comm->nprocs, "local_rank",
          local_rank, "local_size", local_size, "out_file", out_file.c_str(), "out_freq",
          out_freq, "atomic", out_atomic, "mode", out_mode.c_str(), "step",
          static_cast<long long>(update->ntimestep), "ntypes", ntypes, "restart",
          is_restart ? 1 : 0, "restart_rows", restart_rows.c_str());
      PyObject *models;
      if (model_files.size() == 1) {
        models = PyUnicode_FromString(model_file.c_str());
      } else {
        models = PyList_New(static_cast<Py_ssize_t>(model_files.size()));
        for (size_t m = 0; m < model_files.size(); m++)
          PyList_SET_ITEM(models, m, PyUnicode_FromString(model_files[m].c_str()));
      }
      made = PyObject_CallMethod(mod, "create", "OOO", models, elist, opts);
      Py_DECREF(models);
      Py_DECREF(elist);
      Py_XDECREF(opts);
      Py_DECREF(mod);
      if (!made) why = python_error();
    }
    double cut = 0.0;
    long width = DEFAULT_CHUNK;
    if (made) {
      PyObject *c = PyObject_GetAttrString(made, "cutoff");
      cut = c ? PyFloat_AsDouble(c) : -1.0;
      Py_XDECREF(c);
      PyObject *w = PyObject_GetAttrString(made, "exchange_width");
      if (w) width = PyLong_AsLong(w);
      Py_XDECREF(w);
      listed = PyObject_HasAttrString(made, "compute_listed") == 1;
      PyObject *tm = PyObject_GetAttrString(made, "type_note");
      if (tm && PyUnicode_Check(tm)) type_note = PyUnicode_AsUTF8(tm);
      Py_XDECREF(tm);
      PyObject *tw = PyObject_GetAttrString(made, "type_warning");
      if (tw && PyUnicode_Check(tw)) type_warning = PyUnicode_AsUTF8(tw);
      Py_XDECREF(tw);
      list_sent = false;
      PyObject *dev = PyObject_GetAttrString(made, "device_name");
      if (dev && PyUnicode_Check(dev)) device_used = PyUnicode_AsUTF8(dev);
      Py_XDECREF(dev);
      PyObject *cs = PyObject_GetAttrString(made, "charge_spin_text");
      if (cs && PyUnicode_Check(cs)) charge_spin_text = PyUnicode_AsUTF8(cs);
      Py_XDECREF(cs);
      PyErr_Clear();
      if (!install_module()) {
        why = "cannot create the _mdband_lammps module: " + python_error();
        Py_CLEAR(made);
      } else {
        PyObject *capsule = PyCapsule_New(static_cast<void *>(this), CAPSULE_NAME, nullptr);
        if (!capsule || PyObject_SetAttrString(made, "lammps_handle", capsule) < 0) {
          why = "cannot attach the LAMMPS handle: " + python_error();
          Py_CLEAR(made);
        }
        Py_XDECREF(capsule);
      }
      if (made && !(cut > 0.0)) {
        why = "the model reports no positive cutoff";
        Py_CLEAR(made);
      }
    }
    Py_XDECREF(bridge);
    bridge = made;
    ok = bridge ? 1 : 0;
    if (ok) {
      cutoff = cut * dist_cvt;    // the model's cutoff (A) in this input's distance unit
      chunk = static_cast<int>(std::max(6L, std::min(width, 4096L)));
    }
    PyGILState_Release(gil);
  }

  int nok = 0;
  MPI_Allreduce(&ok, &nok, 1, MPI_INT, MPI_SUM, world);
  if (nok == 0) error->all(FLERR, "pair_coeff mdband: {}", why);
  if (!ok) error->one(FLERR, "pair_coeff mdband (rank {}): {}", comm->me, why);

  // committee: rank 0 opens the model-deviation file; every rank stops if it cannot
  if (model_files.size() > 1 && out_freq > 0) {
    int opened = 1;
    if (comm->me == 0) {
      PyGILState_STATE gil = PyGILState_Ensure();
      PyObject *r = PyObject_CallMethod(bridge, "open_output", nullptr);
      if (!r) {
        why = python_error();
        opened = 0;
      }
      Py_XDECREF(r);
      PyGILState_Release(gil);
    }
    MPI_Bcast(&opened, 1, MPI_INT, 0, world);
    if (!opened) error->all(FLERR, "pair_coeff mdband: {}", why);
  }
  last_devi_step = -1;

  // every rank declares the same communication width, so buffers are sized alike
  int cmax = chunk;
  MPI_Allreduce(&chunk, &cmax, 1, MPI_INT, MPI_MAX, world);
  chunk = cmax;
  comm_forward = comm_reverse = comm_reverse_off = chunk;

  if (!allocated) allocate();
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) setflag[i][j] = 1;

  if (comm->me == 0) {
    utils::logmesg(lmp, "mdband: model {} ({}, device {} on rank 0), cutoff {} A, {} rank(s)\n",
                   model_file, dtype, device_used, cutoff / dist_cvt, comm->nprocs);
    if (!charge_spin_text.empty()) utils::logmesg(lmp, "mdband: {}\n", charge_spin_text);
    if (!type_note.empty()) utils::logmesg(lmp, "mdband: {}\n", type_note);
    if (!type_warning.empty()) error->warning(FLERR, "pair_coeff mdband: {}", type_warning);
    if (ener_cvt != 1.0 || dist_cvt != 1.0)
      utils::logmesg(lmp, "mdband: units {}: energies x {:.10g}, distances x {:.10g} of the "
                     "model's eV and Angstrom\n", update->unit_style, ener_cvt, dist_cvt);
  }
  if (comm->me == 0 && model_files.size() > 1)
    utils::logmesg(lmp, "mdband: committee of {} models (the first drives the dynamics); model "
                   "deviation every {} steps -> {}{}\n", model_files.size(), out_freq,
                   out_freq > 0 ? out_file : "(no file)", out_atomic ? " with per-atom columns" : "");
}

void PairMdband::init_style()
{
  if (!bridge) error->all(FLERR, "pair_style mdband: pair_coeff * * [El1 ...] has not been given");
  // full list of local atoms; ghost atoms only appear as neighbours. Message passing needs no
  // wider ghost shell: ghost features are exchanged per layer.
  neighbor->add_request(this, NeighConst::REQ_FULL);
}

double PairMdband::init_one(int i, int j)
{
  if (setflag[i][j] == 0) error->all(FLERR, "All pair coeffs are not set");
  return cutoff;
}

void PairMdband::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  double **x = atom->x;
  double **f = atom->f;
  const double t0 = wall_time();

  // ---- edges: centre (dst) local, neighbour (src) local or ghost, 0 < r < cutoff; or, on the
  // listed path, the list's pairs when LAMMPS rebuilt it (between builds atoms keep their rows)
  const double rc2 = cutoff * cutoff;    // this input's units
  const double coincident = COINCIDENT_R2 * dist_cvt * dist_cvt;
  const double to_angstrom = 1.0 / dist_cvt;
  const bool use_list = listed && model_files.size() == 1;
  const bool send_list = use_list && (neighbor->ago == 0 || !list_sent || nall != list_nall);
  const int inum = list->inum;
  const int *ilist = list->ilist;
  const int *numneigh = list->numneigh;
  int **firstneigh = list->firstneigh;
  if (!use_list || send_list) {
    src.clear();
    dst.clear();
    vec.clear();
  }
  for (int ii = 0; ii < inum && (!use_list || send_list); ii++) {
    const int i = ilist[ii];
    const double xi = x[i][0], yi = x[i][1], zi = x[i][2];
    const int *jlist = firstneigh[i];
    const int jnum = numneigh[i];
    for (int jj = 0; jj < jnum; jj++) {
      const int j = jlist[jj] & NEIGHMASK;
      if (use_list) {    // every pair: the bridge selects those within the cutoff each step
        src.push_back(j);
        dst.push_back(i);
        continue;
      }
      const double dx = x[j][0] - xi, dy = x[j][1] - yi, dz = x[j][2] - zi;
      const double r2 = dx * dx + dy * dy + dz * dz;
      if (r2 < rc2 && r2 > coincident) {
        src.push_back(j);
        dst.push_back(i);
        if (dist_cvt == 1.0) {    // metal, real: Angstrom already (bit for bit)
          vec.push_back(dx);
          vec.push_back(dy);
          vec.push_back(dz);
        } else {
          vec.push_back(dx * to_angstrom);
          vec.push_back(dy * to_angstrom);
          vec.push_back(dz * to_angstrom);
        }
      }
    }
  }
  if (send_list) {
    list_sent = true;
    list_nall = nall;
    list_sends++;
  }
  fbuf.assign(3 * static_cast<size_t>(nall), 0.0);
  // committee: this step's row (once per step) and/or a deviation asked for by fix pair
  const bool committee = model_files.size() > 1;
  const long long step = static_cast<long long>(update->ntimestep);
  const bool write_row = committee && out_freq > 0 && step % out_freq == 0 && step != last_devi_step;
  const bool devi_now = committee && (write_row || devi_trigger);
  if (committee) {
    devi_buf.assign(3 + 9 * model_files.size(), 0.0);
    devi_atom.assign(std::max(nlocal, 1), 0.0);    // never empty: fix pair needs a pointer
  }
  const bool virial_atom = vflag_atom || cvflag_atom;
  if (eflag_atom) eabuf.assign(nlocal, 0.0);
  if (virial_atom) vabuf.assign(9 * static_cast<size_t>(nall), 0.0);
  std::fill(out, out + 7, 0.0);
  const double t1 = wall_time();

  // ---- Python: energy, forces, per-atom energies and virial
  PyGILState_STATE gil = PyGILState_Ensure();
  const size_t ne = src.size();
  PyObject *a_type = view(atom->type, sizeof(int) * nall, false);
  PyObject *a_src = view(src.data(), sizeof(int64_t) * ne, true);
  PyObject *a_dst = view(dst.data(), sizeof(int64_t) * ne, true);
  PyObject *a_vec = view(vec.data(), sizeof(double) * 3 * ne, true);
  PyObject *a_f = view(fbuf.data(), sizeof(double) * fbuf.size(), true);
  PyObject *a_ea = eflag_atom ? view(eabuf.data(), sizeof(double) * nlocal, true) : Py_None;
  PyObject *a_va = virial_atom ? view(vabuf.data(), sizeof(double) * vabuf.size(), true)
                               : Py_None;
  PyObject *a_out = view(out, sizeof(out), true);
  if (!eflag_atom) Py_INCREF(Py_None);
  if (!virial_atom) Py_INCREF(Py_None);
  PyObject *res;
  if (committee) {
    PyObject *a_dv = devi_now ? view(devi_buf.data(), sizeof(double) * devi_buf.size(), true)
                              : Py_None;
    PyObject *a_da = devi_now ? view(devi_atom.data(), sizeof(double) * nlocal, true) : Py_None;
    if (!devi_now) {
      Py_INCREF(Py_None);
      Py_INCREF(Py_None);
    }
    res = PyObject_CallMethod(bridge, "compute", "iiOOOOOOOOOO", nlocal, nall - nlocal, a_type,
                              a_src, a_dst, a_vec, a_f, a_ea, a_va, a_out, a_dv, a_da);
    Py_XDECREF(a_dv);
    Py_XDECREF(a_da);
  } else if (use_list) {
    const double *xa = nall ? &x[0][0] : nullptr;
    if (dist_cvt != 1.0) {
      xbuf.resize(3 * static_cast<size_t>(nall));
      for (size_t k = 0; k < xbuf.size(); k++) xbuf[k] = xa[k] * to_angstrom;
      xa = xbuf.data();
    }
    PyObject *a_x = view(const_cast<double *>(xa), sizeof(double) * 3 * nall, false);
    PyObject *l_src = send_list ? a_src : Py_None;
    PyObject *l_dst = send_list ? a_dst : Py_None;
    res = PyObject_CallMethod(bridge, "compute_listed", "iiOOOOOOOO", nlocal, nall - nlocal,
                              a_type, a_x, l_src, l_dst, a_f, a_ea, a_va, a_out);
    Py_XDECREF(a_x);
  } else {
    res = PyObject_CallMethod(bridge, "compute", "iiOOOOOOOO", nlocal, nall - nlocal, a_type,
                              a_src, a_dst, a_vec, a_f, a_ea, a_va, a_out);
  }
  if (!res) list_sent = false;    // the bridge may not hold the list: send it again
  for (PyObject *o : {a_type, a_src, a_dst, a_vec, a_f, a_ea, a_va, a_out}) Py_XDECREF(o);
  if (!res) {
    const std::string msg = python_error();
    PyGILState_Release(gil);
    error->one(FLERR, "pair_style mdband: model evaluation failed on rank {}: {}", comm->me, msg);
  }
  Py_DECREF(res);
  PyGILState_Release(gil);
  if (devi_now) {
    // deviations in this input's units, as pair_style deepmd writes them
    for (int k = 0; k < 3; k++) devi_buf[k] *= force_cvt;
    for (size_t k = 3; k < devi_buf.size(); k++) devi_buf[k] *= ener_cvt;
    for (int i = 0; i < nlocal; i++) devi_atom[i] *= force_cvt;
    reduce_deviation(step, write_row, nlocal);
  }
  const double t2 = wall_time();

  // ---- forces, per-atom virial: ghost contributions go to their owners; model units (eV, A)
  // to this input's (multiplying by 1.0 in metal units changes no bit)
  const int nrows = force->newton_pair ? nall : nlocal;
  if (!force->newton_pair) {
    // with newton off LAMMPS drops ghost forces: send them to their owners ourselves
    comm_rows(fbuf.data(), 3, true);
    if (virial_atom) comm_rows(vabuf.data(), 9, true);
  }
  // (newton on: LAMMPS sums the forces and per-atom virials of ghost atoms into their owners)
  for (int i = 0; i < nrows; i++) {
    f[i][0] += fbuf[3 * i] * force_cvt;
    f[i][1] += fbuf[3 * i + 1] * force_cvt;
    f[i][2] += fbuf[3 * i + 2] * force_cvt;
  }
  if (vflag_atom)
    for (int i = 0; i < nrows; i++)
      for (int k = 0; k < 6; k++) vatom[i][k] += vabuf[9 * i + k] * ener_cvt;
  if (cvflag_atom)
    for (int i = 0; i < nrows; i++)
      for (int k = 0; k < 9; k++) cvatom[i][k] += vabuf[9 * i + k] * ener_cvt;
  if (eflag_global) eng_vdwl += out[0] * ener_cvt;
  if (eflag_atom)
    for (int i = 0; i < nlocal; i++) eatom[i] += eabuf[i] * ener_cvt;
  if (vflag_global)
    for (int k = 0; k < 6; k++) virial[k] += out[1 + k] * ener_cvt;
  const double t3 = wall_time();
  ncalls++;
  t_edges += t1 - t0;
  t_python += t2 - t1;
  t_post += t3 - t2;
}

// ---- committee: deviations reduced over the ranks, written by rank 0 -----------------------

void PairMdband::reduce_deviation(long long step, bool write_row, int nlocal)
{
  const int nv = 9 * static_cast<int>(model_files.size());
  double fmax = 0.0, fmin = 0.0, fsum = 0.0;
  std::vector<double> vir(nv, 0.0);
  MPI_Reduce(&devi_buf[0], &fmax, 1, MPI_DOUBLE, MPI_MAX, 0, world);
  MPI_Reduce(&devi_buf[1], &fmin, 1, MPI_DOUBLE, MPI_MIN, 0, world);
  MPI_Reduce(&devi_buf[2], &fsum, 1, MPI_DOUBLE, MPI_SUM, 0, world);
  MPI_Reduce(&devi_buf[3], vir.data(), nv, MPI_DOUBLE, MPI_SUM, 0, world);
  if (!write_row) return;
  last_devi_step = step;

  // per-atom columns: every rank's values to rank 0, in atom-ID order
  std::vector<double> by_tag;
  if (out_atomic) {
    const int nprocs = comm->nprocs;
    std::vector<int> counts(nprocs, 0), displs(nprocs, 0);
    MPI_Gather(&nlocal, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world);
    int total = 0;
    for (int r = 0; r < nprocs; r++) {
      displs[r] = total;
      total += counts[r];
    }
    std::vector<tagint> tags(std::max(total, 1)), mine(atom->tag, atom->tag + nlocal);
    std::vector<double> values(std::max(total, 1));
    MPI_Gatherv(mine.data(), nlocal, MPI_LMP_TAGINT, tags.data(), counts.data(), displs.data(),
                MPI_LMP_TAGINT, 0, world);
    MPI_Gatherv(devi_atom.data(), nlocal, MPI_DOUBLE, values.data(), counts.data(),
                displs.data(), MPI_DOUBLE, 0, world);
    if (comm->me == 0) {
      std::vector<int> order(total);
      for (int i = 0; i < total; i++) order[i] = i;
      std::sort(order.begin(), order.end(), [&](int a, int b) { return tags[a] < tags[b]; });
      by_tag.resize(total);
      for (int i = 0; i < total; i++) by_tag[i] = values[order[i]];
    }
  }
  if (comm->me != 0) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *a_vir = view(vir.data(), sizeof(double) * vir.size(), false);
  PyObject *a_atom = out_atomic ? view(by_tag.data(), sizeof(double) * by_tag.size(), false)
                                : Py_None;
  if (!out_atomic) Py_INCREF(Py_None);
  PyObject *res = PyObject_CallMethod(bridge, "write_deviation", "LdddLOO", step, fmax, fmin,
                                      fsum, static_cast<long long>(atom->natoms), a_vir, a_atom);
  Py_XDECREF(a_vir);
  Py_XDECREF(a_atom);
  if (!res) {
    const std::string msg = python_error();
    PyGILState_Release(gil);
    error->one(FLERR, "pair_style mdband: cannot write the model deviation: {}", msg);
  }
  Py_DECREF(res);
  PyGILState_Release(gil);
}

// fix pair N mdband devi_f 1: devi_f_flag asks for the deviations on that step
void *PairMdband::extract(const char *name, int &dim)
{
  dim = 0;
  if (model_files.size() > 1 && std::strcmp(name, "devi_f_flag") == 0) return &devi_trigger;
  return nullptr;
}

// fix pair N mdband devi_f 0|1: per-atom force deviation (force units) of the last deviation step
void *PairMdband::extract_peratom(const char *name, int &ncol)
{
  ncol = 0;
  if (model_files.size() > 1 && std::strcmp(name, "devi_f") == 0) {
    if (devi_atom.empty()) devi_atom.assign(std::max(atom->nlocal, 1), 0.0);
    return devi_atom.data();
  }
  return nullptr;
}

// ---- communication of per-atom rows --------------------------------------------------------

void PairMdband::comm_rows(double *rows, int stride, bool reverse)
{
  // columns in chunks of at most `chunk` doubles per atom: LAMMPS sized its buffers for that
  comm_buf = rows;
  comm_stride = stride;
  for (int off = 0; off < stride; off += chunk) {
    comm_offset = off;
    comm_width = std::min(chunk, stride - off);
    if (reverse)
      comm->reverse_comm(this, comm_width);
    else
      comm->forward_comm(this, comm_width);
  }
  comm_buf = nullptr;
  comm_stride = comm_offset = comm_width = 0;
}

void PairMdband::exchange_rows(double *rows, long nrows, int width, bool reverse)
{
  const long nall = static_cast<long>(atom->nlocal) + atom->nghost;
  if (nrows != nall)
    error->one(FLERR, "mdband exchange: {} rows given, but this rank has {} local+ghost atoms",
               nrows, nall);
  if (width <= 0) return;
  comm_rows(rows, width, reverse);
}

int PairMdband::pack_forward_comm(int n, int *list, double *buf, int /*pbc_flag*/, int * /*pbc*/)
{
  int m = 0;
  for (int k = 0; k < n; k++) {
    const double *row = comm_buf + static_cast<size_t>(list[k]) * comm_stride + comm_offset;
    for (int c = 0; c < comm_width; c++) buf[m++] = row[c];
  }
  return m;
}

void PairMdband::unpack_forward_comm(int n, int first, double *buf)
{
  int m = 0;
  for (int i = first; i < first + n; i++) {
    double *row = comm_buf + static_cast<size_t>(i) * comm_stride + comm_offset;
    for (int c = 0; c < comm_width; c++) row[c] = buf[m++];
  }
}

int PairMdband::pack_reverse_comm(int n, int first, double *buf)
{
  int m = 0;
  for (int i = first; i < first + n; i++) {
    const double *row = comm_buf + static_cast<size_t>(i) * comm_stride + comm_offset;
    for (int c = 0; c < comm_width; c++) buf[m++] = row[c];
  }
  return m;
}

void PairMdband::unpack_reverse_comm(int n, int *list, double *buf)
{
  int m = 0;
  for (int k = 0; k < n; k++) {
    double *row = comm_buf + static_cast<size_t>(list[k]) * comm_stride + comm_offset;
    for (int c = 0; c < comm_width; c++) row[c] += buf[m++];
  }
}

double PairMdband::memory_usage()
{
  double bytes = Pair::memory_usage();
  bytes += (src.capacity() + dst.capacity()) * sizeof(int64_t);
  bytes += (vec.capacity() + fbuf.capacity() + eabuf.capacity() + vabuf.capacity() +
            xbuf.capacity() + devi_atom.capacity()) * sizeof(double);
  return bytes;
}
