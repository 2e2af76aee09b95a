// Registers `pair_style mdband` with LAMMPS when the plugin is loaded (by `plugin load` or by
// the automatic loading of every *plugin.so found in LAMMPS_PLUGIN_PATH).
#include "lammps.h"
#include "pair_mdband.h"
#include "plugin_abi.h"

#ifndef MDBAND_LAMMPS_VERSION
#error "MDBAND_LAMMPS_VERSION must be defined by the build (e.g. \"22 Jul 2025\")"
#endif

static void *make_pair_mdband(void *lmp)
{
  return new LAMMPS_NS::PairMdband(static_cast<LAMMPS_NS::LAMMPS *>(lmp));
}

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
{
  lammpsplugin_t entry;
  entry.version = MDBAND_LAMMPS_VERSION;
  entry.style = "pair";
  entry.name = "mdband";
  entry.info = "mdband machine-learned potentials (SeZM/DPA4) evaluated through embedded Python";
  entry.author = "the mdband developers";
  entry.creator.v1 = &make_pair_mdband;
  entry.handle = handle;
  auto reg = reinterpret_cast<lammpsplugin_regfunc>(regfunc);
  reg(&entry, lmp);
}
