/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llvm_shim: the few things codegen.c needs from LLVM that its C API lacks,
 * exported as plain C functions (the pattern of rustc's llvm-wrapper).
 *
 * What is here, and why the C API cannot do it:
 *  - llc's code-generation flags (-fp-contract, -trap-unreachable,
 *    -no-trap-after-noreturn, -frame-pointer, ...) live in
 *    llvm::codegen::RegisterCodeGenFlags, and the TargetOptions built from
 *    them (codegen::InitTargetOptionsFromCodeGenFlags) can only be handed
 *    to a TargetMachine from C++.
 *  - Validating option names against cl::getRegisteredOptions() before
 *    cl::ParseCommandLineOptions() (which accepts or exits otherwise).
 *  - llc's target lookup (-march adjusts the triple's arch) and the
 *    processor/feature tables used to refuse unknown CPUs and features.
 *  - Parsing with llc's data-layout callback: llc picks the TargetMachine
 *    once the parser has read the module's triple, and the parser then
 *    uses that machine's data layout (default alignments of loads and
 *    stores depend on it, so setting the layout after parsing gives
 *    different PTX).
 *  - llc's diagnostic handler (severity prefix, SrcMgr diagnostics), the
 *    module preparation llc does before codegen (data layout, verifier,
 *    codegen::setFunctionAttributes) and the emit step itself, which needs
 *    a TargetLibraryInfo for the module's triple, -filetype=null and the
 *    MC diagnostic hook, none of which LLVMTargetMachineEmitToMemoryBuffer
 *    offers.
 *
 * Each function mirrors the corresponding lines of LLVM 22's
 * tools/llc/llc.cpp, so that the PTX and the stderr text are llc's.
 * Diagnostics are written to llvm::errs() exactly as llc writes them; the
 * caller (codegen.c) captures file descriptor 2 around a job.
 *
 * It must never: hold per-job state between calls (everything per job lives
 * in the LLVMContext the caller creates), exit or abort on its own (only
 * LLVM's fatal-error path may end the process), or grow beyond what the C
 * API lacks: target selection policy, strict checks, caching, pipelines
 * and stderr capture stay in codegen.c.
 */
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "llvm-c/Core.h"
#include "llvm-c/TargetMachine.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/CodeGen/CommandFlags.h"
#include "llvm/CodeGen/MachineModuleInfo.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/DiagnosticPrinter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

using namespace llvm;

/* LLVM's fatal-error handler, with what the C API's version drops:
 * gen_crash_diag, false for errors LLVM reports as usage errors (llc then
 * prints "LLVM ERROR: ..." and exits 1 instead of aborting). */
static void (*fatal_fn)(const char *reason, int gen_crash_diag);

static void fatal_trampoline(void *, const char *reason, bool gen_crash_diag)
{
	fatal_fn(reason, gen_crash_diag);
}

extern "C" void ptxc_install_fatal_handler(void (*fn)(const char *reason, int gen_crash_diag))
{
	fatal_fn = fn;
	install_fatal_error_handler(fatal_trampoline, nullptr);
}

/* LLVM's own (C++) wrap/unwrap for these handles. */
static TargetMachine *unwrap_tm(LLVMTargetMachineRef p)
{
	return reinterpret_cast<TargetMachine *>(p);
}

static char *dup_string(const std::string &s)
{
	return strdup(s.c_str());
}

/* llc registers these at start-up; we do it on first use, from whichever
 * entry point comes first. Function-local statics: no static-init order. */
static void register_flags()
{
	static codegen::RegisterCodeGenFlags *cgf = new codegen::RegisterCodeGenFlags();
	(void)cgf;
}

/* Options that llc takes per job (the caller's struct codegen_job fields),
 * options that print and exit, and llc's own file options: never
 * process-wide. */
static bool is_per_job(StringRef name)
{
	static const char *const names[] = {
		"O", "mtriple", "march", "mcpu", "mattr", "o", "filetype", "x",
		"help", "help-hidden", "help-list", "help-list-hidden", "version",
		"print-options", "print-all-options",
	};
	for (const char *n : names)
		if (name == n)
			return true;
	return false;
}

/* 1 if name (no dashes, no "=value") is a registered LLVM option that may
 * be set process-wide: not per-job (-mcpu, -O, ...), not help/version. */
extern "C" int ptxc_option_known(const char *name)
{
	register_flags();
	StringRef n(name);
	if (n.empty() || is_per_job(n))
		return 0;
	auto &opts = cl::getRegisteredOptions();
	auto it = opts.find(n);
	if (it == opts.end())
		return 0;
	/* Positional and sink options have no name to pass. */
	return it->second->getFormattingFlag() != cl::Positional;
}

/* Apply llc-style options process-wide. Every name is checked first (an
 * unknown one: -1, *err = "unknown LLVM option '-foo'"); then
 * cl::ParseCommandLineOptions, whose complaints about values it writes to
 * stderr itself (codegen.c captures them). 0 on success, else -1 and *err
 * (malloc'd, may be empty) says why. */
extern "C" int ptxc_parse_options(int argc, const char *const *argv, char **err)
{
	register_flags();
	*err = nullptr;
	for (int i = 0; i < argc; i++) {
		StringRef a(argv[i]);
		if (!a.consume_front("-")) {
			*err = dup_string("unexpected argument '" + a.str() +
					  "': options must start with '-'");
			return -1;
		}
		a.consume_front("-");
		StringRef name = a.split('=').first;
		if (!ptxc_option_known(name.str().c_str())) {
			if (is_per_job(name))
				*err = dup_string("option '" + std::string(argv[i]) +
						  "' is per job, not process-wide");
			else
				*err = dup_string("unknown LLVM option '" +
						  std::string(argv[i]) + "'");
			return -1;
		}
	}
	std::vector<const char *> args;
	args.push_back("llc");
	args.insert(args.end(), argv, argv + argc);
	std::string msg;
	raw_string_ostream os(msg);
	if (!cl::ParseCommandLineOptions((int)args.size(), args.data(), "", &os)) {
		os.flush();
		while (!msg.empty() && msg.back() == '\n')
			msg.pop_back();
		*err = dup_string(msg);
		return -1;
	}
	return 0;
}

/* llc's target choice: triple (already normalised) or, if empty,
 * default_triple; march, when given, picks the target by name and sets the
 * triple's arch. Returns the final triple (malloc'd), or NULL with LLVM's
 * message in *err (malloc'd). */
extern "C" char *ptxc_resolve_triple(const char *triple, const char *march,
				     const char *default_triple, char **err)
{
	Triple tt(triple ? triple : "");
	if (tt.getTriple().empty())
		tt.setTriple(default_triple);
	std::string e;
	const Target *t = TargetRegistry::lookupTarget(march ? march : "", tt, e);
	if (!t) {
		while (!e.empty() && e.back() == '\n')
			e.pop_back();
		*err = dup_string(e);
		return nullptr;
	}
	return dup_string(tt.getTriple());
}

/* One MCSubtargetInfo with the target's tables, made once. */
static const MCSubtargetInfo *tables(const char *triple)
{
	static std::unique_ptr<MCSubtargetInfo> sti;
	if (!sti) {
		std::string e;
		Triple tt(triple);
		const Target *t = TargetRegistry::lookupTarget(tt, e);
		if (!t)
			return nullptr;
		sti.reset(t->createMCSubtargetInfo(tt, "", ""));
	}
	return sti.get();
}

/* 1 if cpu is in the processor table of triple's target. */
extern "C" int ptxc_cpu_known(const char *triple, const char *cpu)
{
	const MCSubtargetInfo *sti = tables(triple);
	return sti && sti->isCPUStringValid(cpu);
}

/* 1 if feature ("+ptx90", "-ptx90") is in the feature table. */
extern "C" int ptxc_feature_known(const char *triple, const char *feature)
{
	const MCSubtargetInfo *sti = tables(triple);
	StringRef f(feature);
	if (!sti || !(f.consume_front("+") || f.consume_front("-")))
		return 0;
	for (const SubtargetFeatureKV &kv : sti->getAllProcessorFeatures())
		if (f == kv.Key)
			return 1;
	return 0;
}

/* A TargetMachine as llc makes it: TargetOptions from the codegen flags,
 * asm verbosity on, explicit reloc/code model only if given, level 0..3.
 * NULL if the triple has no target. Dispose with
 * LLVMDisposeTargetMachine. */
extern "C" LLVMTargetMachineRef ptxc_create_tm(const char *triple, const char *cpu,
					       const char *features, int opt_level)
{
	register_flags();
	std::string e;
	Triple tt(triple);
	const Target *t = TargetRegistry::lookupTarget(tt, e);
	if (!t)
		return nullptr;
	/* As llc's InitializeOptions(): flags first, then llc's own defaults
	 * (asm verbosity and comments on, the target picks .file syntax). */
	TargetOptions opts = codegen::InitTargetOptionsFromCodeGenFlags(tt);
	opts.MCOptions.AsmVerbose = true;
	opts.MCOptions.PreserveAsmComments = true;
	opts.MCOptions.MCUseDwarfDirectory = MCTargetOptions::DefaultDwarfDirectory;
	std::optional<CodeGenOptLevel> ol = CodeGenOpt::getLevel(opt_level);
	TargetMachine *tm = t->createTargetMachine(tt, cpu, features, opts,
						   codegen::getExplicitRelocModel(),
						   codegen::getExplicitCodeModel(),
						   ol ? *ol : CodeGenOptLevel::Default);
	if (!tm)
		return nullptr;
	if (codegen::getFloatABIForCalls() != FloatABI::Default)
		tm->Options.FloatABIType = codegen::getFloatABIForCalls();
	tm->Options.VerifyArgABICompliance = 0;
	return reinterpret_cast<LLVMTargetMachineRef>(tm);
}

/* Parse IR text or bitcode (raw or wrapped) named name. pick(arg, triple)
 * is called with the module's own triple as soon as the parser knows it
 * and returns the TargetMachine whose data layout the module gets, or NULL
 * to leave the layout alone (the caller then refuses the job). On a parse
 * error: NULL, *err = the SMDiagnostic text as llc prints it (malloc'd). */
extern "C" LLVMModuleRef ptxc_parse(LLVMContextRef ctx, const char *data, size_t len,
				   const char *name,
				   LLVMTargetMachineRef (*pick)(void *arg, const char *triple),
				   void *arg, char **err)
{
	*err = nullptr;
	/* The copy gives the lexer the NUL it needs at the end. */
	std::unique_ptr<MemoryBuffer> mb =
		MemoryBuffer::getMemBufferCopy(StringRef(data, len), name);
	/* As llc: the TargetMachine is chosen from the module's own triple
	 * once the parser has read it, and its data layout is in force for
	 * the rest of the parse (default alignments depend on it). */
	auto set_layout = [&](StringRef triple, StringRef) -> std::optional<std::string> {
		LLVMTargetMachineRef tm = pick(arg, triple.str().c_str());
		if (!tm)
			return std::nullopt;
		return unwrap_tm(tm)->createDataLayout().getStringRepresentation();
	};
	SMDiagnostic diag;
	std::unique_ptr<Module> m = parseIR(mb->getMemBufferRef(), diag, *unwrap(ctx),
					    ParserCallbacks(set_layout));
	if (!m) {
		std::string msg;
		raw_string_ostream os(msg);
		diag.print(nullptr, os, false);
		os.flush();
		*err = dup_string(msg);
		return nullptr;
	}
	return wrap(m.release());
}

namespace {
/* llc's LLCDiagnosticHandler (tools/llc/NewPMDriver.cpp of LLVM 22). */
struct LlcDiagHandler : public DiagnosticHandler {
	bool handleDiagnostics(const DiagnosticInfo &di) override
	{
		DiagnosticHandler::handleDiagnostics(di);
		if (di.getKind() == DK_SrcMgr) {
			const auto &dism = cast<DiagnosticInfoSrcMgr>(di);
			const SMDiagnostic &smd = dism.getSMDiag();
			if (smd.getKind() == SourceMgr::DK_Error)
				HasErrors = true;
			smd.print(nullptr, errs());
			if (dism.isInlineAsmDiag() && dism.getLocCookie())
				WithColor::note() << "!srcloc = " << dism.getLocCookie() << "\n";
			return true;
		}
		if (di.getSeverity() == DS_Error)
			HasErrors = true;
		if (auto *remark = dyn_cast<DiagnosticInfoOptimizationBase>(&di))
			if (!remark->isEnabled())
				return true;
		DiagnosticPrinterRawOStream dp(errs());
		errs() << LLVMContext::getDiagnosticMessagePrefix(di.getSeverity()) << ": ";
		di.print(dp);
		errs() << "\n";
		return true;
	}
};
} // namespace

/* Install llc's diagnostic handler on ctx: prints to errs() and counts
 * errors (read back by ptxc_emit). */
extern "C" void ptxc_set_diag_handler(LLVMContextRef ctx)
{
	unwrap(ctx)->setDiagnosticHandler(std::make_unique<LlcDiagHandler>());
}

/* What llc does between parsing and codegen: the TargetMachine's data
 * layout, the verifier (on failure its messages and llc's "input module
 * cannot be verified" line go to errs(), -1), and the target-cpu /
 * target-features attributes plus attribute-setting codegen flags. */
extern "C" int ptxc_prepare_module(LLVMTargetMachineRef tmr, LLVMModuleRef mr,
				   const char *name, const char *cpu, const char *features)
{
	TargetMachine *tm = unwrap_tm(tmr);
	Module *m = unwrap(mr);
	/* llc sets the TargetMachine's layout through the parser callback. */
	m->setDataLayout(tm->createDataLayout());
	if (verifyModule(*m, &errs())) {
		WithColor::error(errs(), "llc") << "'" << name
						<< "': input module cannot be verified\n";
		return -1;
	}
	codegen::setFunctionAttributes(cpu, features, *m);
	return 0;
}

/* Run llc's codegen pipeline on m: PTX (emit=1) or nothing (emit=0,
 * -filetype=null). *out (malloc'd, NUL-terminated) gets what was written,
 * also on failure. -1 if a diagnostic was an error, as llc exits 1. */
extern "C" int ptxc_emit(LLVMTargetMachineRef tmr, LLVMModuleRef mr, int emit,
			 char **out, size_t *out_len)
{
	TargetMachine *tm = unwrap_tm(tmr);
	Module *m = unwrap(mr);
	*out = nullptr;
	*out_len = 0;

	/* llc: the module's code model applies unless -code-model was given.
	 * The TargetMachine may be cached, so put it back afterwards. */
	CodeModel::Model saved_cm = tm->getCodeModel();
	std::optional<CodeModel::Model> cm_ir = m->getCodeModel();
	if (!codegen::getExplicitCodeModel() && cm_ir)
		tm->setCodeModel(*cm_ir);

	TargetLibraryInfoImpl tlii(m->getTargetTriple());
	legacy::PassManager pm;
	pm.add(new TargetLibraryInfoWrapperPass(tlii));

	SmallVector<char, 0> buf;
	raw_svector_ostream os(buf);
	auto *mmiwp = new MachineModuleInfoWrapperPass(tm);
	bool mc_errors = false;
	mmiwp->getMMI().getContext().setDiagnosticHandler(
		[&](const SMDiagnostic &smd, bool, const SourceMgr &,
		    std::vector<const MDNode *> &) {
			WithColor::error(errs(), "llc") << smd.getMessage() << '\n';
			mc_errors = true;
		});
	int rc = 0;
	if (tm->addPassesToEmitFile(pm, os, nullptr,
				    emit ? CodeGenFileType::AssemblyFile
					 : CodeGenFileType::Null,
				    /*DisableVerify=*/false, mmiwp)) {
		if (!mc_errors)
			WithColor::error(errs(), "llc")
				<< "target does not support generation of this file type\n";
		rc = -1;
	} else {
		pm.run(*m);
		if (m->getContext().getDiagHandlerPtr()->HasErrors || mc_errors)
			rc = -1;
	}
	tm->setCodeModel(saved_cm);

	*out_len = buf.size();
	*out = static_cast<char *>(malloc(buf.size() + 1));
	if (*out) {
		memcpy(*out, buf.data(), buf.size());
		(*out)[buf.size()] = '\0';
	}
	return rc;
}
