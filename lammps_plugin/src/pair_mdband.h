// pair_style mdband: a LAMMPS pair style whose energy and forces come from an mdband model,
// evaluated by the Python package `mdband` in an interpreter embedded in (or hosting) LAMMPS.
//
//   pair_style mdband MODEL [MODEL2 ...] [dtype float32|float64] [device cpu|cuda|auto]
//                     [head NAME] [charge Q] [spin S] [out_freq N] [out_file FILE] [atomic]
//                     [append|overwrite] [restart_rows repeat|continue]
//   pair_coeff * * [El1 El2 ...]      (element of each LAMMPS atom type; none: the model's
//                                      type map in order, as pair_style deepmd)
//
// Every unit style but lj: positions are converted to Angstrom and the model's eV, eV/A and
// eV to the input's energy, force and energy units at this boundary, with deepmd-kit's
// factors (energy: boltz / 8.617343e-5, distance: force->angstrom).
//
// With several models (a committee) the first one drives the dynamics and every out_freq steps
// all are evaluated on the same edges; rank 0 writes their deviations to out_file in
// deepmd-kit's model_devi.out layout, and `fix pair N mdband devi_f 0|1` reads the per-atom
// force deviation.
//
// Each step the pair style builds the edge list of the local atoms (centre = local atom,
// neighbour = local or ghost atom within the model cutoff) and hands it to Python, which returns
// the energy of the local atoms, forces on local and ghost atoms, per-atom energies and the
// virial. Message-passing models refresh the node features of ghost atoms before every
// interaction block through exchange_rows(): LAMMPS' own forward communication (owner -> ghost
// copy) in the forward pass and reverse communication (ghost -> owner sum) in the backward pass.
#ifndef MDBAND_PAIR_MDBAND_H
#define MDBAND_PAIR_MDBAND_H

#include "pair.h"

#include <cstdint>
#include <string>
#include <vector>

typedef struct _object PyObject;    // keeps Python.h out of this header

namespace LAMMPS_NS {

class PairMdband : public Pair {
 public:
  PairMdband(class LAMMPS *);
  ~PairMdband() override;

  void compute(int, int) override;
  void settings(int, char **) override;
  void coeff(int, char **) override;
  void init_style() override;
  double init_one(int, int) override;
  double memory_usage() override;
  void *extract(const char *, int &) override;
  void *extract_peratom(const char *, int &) override;
  void write_restart(FILE *) override;
  void read_restart(FILE *) override;

  int pack_forward_comm(int, int *, double *, int, int *) override;
  void unpack_forward_comm(int, int, double *) override;
  int pack_reverse_comm(int, int, double *) override;
  void unpack_reverse_comm(int, int *, double *) override;

  // Collective over all ranks. rows: (nrows, width) row-major doubles, one row per local+ghost
  // atom. reverse=false: ghost rows <- their owners' rows; reverse=true: ghost rows are added
  // into their owners' rows (ghost rows are left as they were).
  void exchange_rows(double *rows, long nrows, int width, bool reverse);

 protected:
  std::string model_file, dtype, device, head;
  std::string charge, spin;    // total charge and spin multiplicity as given ("": not given)
  std::vector<std::string> model_files;    // the committee (model_file = the first)
  std::string device_used;    // torch device the model runs on (this rank)
  std::vector<std::string> elements;    // element of each LAMMPS type (index type-1); empty:
                                        // the model's type map in order
  double ener_cvt, dist_cvt, force_cvt;    // model units (eV, A) -> this input's units
  bool is_restart;                         // the pair style came from a restart file
  std::string type_note;                   // how the types were mapped (logged by rank 0)
  std::string type_warning;                // e.g. a positional map onto a larger type map
  PyObject *bridge;                     // object returned by <bridge module>.create(...)
  double cutoff;
  int chunk;    // most doubles per atom in one communication call (= comm_forward)
  int local_rank, local_size;

  // per-step buffers handed to Python
  std::vector<int64_t> src, dst;    // neighbour and centre atom of each edge
  std::vector<double> vec;          // x[src] - x[dst], 3 per edge
  std::vector<double> fbuf;         // forces on local+ghost atoms, 3 per atom
  std::vector<double> eabuf;        // per-atom energies of local atoms
  std::vector<double> vabuf;        // per-atom virial of local+ghost atoms, 9 per atom in
                                    // LAMMPS' centroid order xx yy zz xy xz yz yx zx zy
  std::vector<double> xbuf;         // positions in Angstrom (units other than metal/real)
  double out[7];                    // energy, virial xx yy zz xy xz yz

  // what the pack/unpack callbacks move: comm_width columns starting at comm_offset of rows
  // of comm_stride doubles
  double *comm_buf;
  int comm_stride, comm_offset, comm_width;
  void comm_rows(double *rows, int stride, bool reverse);

  // committee: model deviation every out_freq steps (or when fix pair sets devi_trigger)
  int out_freq, out_atomic, devi_trigger;
  std::string out_file, out_mode;           // out_mode: new | append | overwrite
  std::string restart_rows;                 // repeat | continue (a continued file's rows)
  long long last_devi_step;                 // last step whose row was written (-1: none)
  std::vector<double> devi_buf;             // this rank's partials: max, min, sum, 9 per model
  std::vector<double> devi_atom;            // per-atom force deviation of the local atoms
  void reduce_deviation(long long step, bool write_row, int nlocal);

  // one model, a bridge with compute_listed: LAMMPS' full list goes to the bridge only after
  // LAMMPS rebuilt it (its pairs, skin included, stay on the model's device; each step sends
  // the positions); a committee gets the edges within the cutoff every step
  bool listed;            // the bridge offers compute_listed
  bool list_sent;         // the bridge holds the pairs of the current list
  int list_nall;          // local + ghost atoms when the list was sent
  long list_sends;        // lists sent (diagnostics)

  // diagnostics (MDBAND_TIMING=1 prints them per rank when the pair style is deleted)
  long ncalls;
  double t_edges, t_python, t_post;

  void allocate();
};

}    // namespace LAMMPS_NS

#endif
