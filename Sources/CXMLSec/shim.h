#ifndef PARLEY_CXMLSEC_SHIM_H
#define PARLEY_CXMLSEC_SHIM_H
/* libxml2 and libxmlsec1 (OpenSSL back end), for reading who signed in through SAML2
   (SAMLIdentity). Only what SAMLIdentity calls: the parse that never loads a DTD or an
   entity, the once-per-process set-up, and the signature context with its allowed
   algorithms. Macros and libxml2's per-thread globals are behind c_parley_* functions. */

/* The -D flags of `pkg-config --cflags xmlsec1-openssl`, which SwiftPM drops ("prohibited
   flags"). They must match how the library was built: XMLSEC_NO_SIZE_T sets the width of
   xmlSecSize and so the layout of every xmlsec struct. SAMLIdentityTests compares this
   list with pkg-config's on the machine that runs the tests. */
#define XMLSEC_NO_SIZE_T 1
#define XMLSEC_OPENSSL3_ENGINES 1
#define XMLSEC_NO_GOST 1
#define XMLSEC_NO_GOST2012 1
#define XMLSEC_NO_CRYPTO_DYNAMIC_LOADING 1
#define XMLSEC_CRYPTO_OPENSSL 1
#define __XMLSEC_FUNCTION__ __func__

#include <libxml/parser.h>
#include <libxml/parserInternals.h>
#include <libxml/tree.h>
#include <libxml/valid.h>
#include <libxml/xmlerror.h>
#include <xmlsec/xmlsec.h>
#include <xmlsec/io.h>
#include <xmlsec/errors.h>
#include <xmlsec/keys.h>
#include <xmlsec/list.h>
#include <xmlsec/transforms.h>
#include <xmlsec/xmldsig.h>
#include <xmlsec/openssl/app.h>
#include <xmlsec/openssl/crypto.h>

/* ---- silence: nothing libxml2 or xmlsec reports reaches stderr ---- */

static inline void c_parley_xml_silent_structured(void *ctx, xmlErrorPtr error) { (void)ctx; (void)error; }
/* libxml2's generic handler is variadic; this one never reads its arguments. */
static inline void c_parley_xml_silent_generic(void *ctx, const char *msg, ...) { (void)ctx; (void)msg; }
static inline void c_parley_xmlsec_silent(const char *file, int line, const char *func, const char *errorObject,
                                          const char *errorSubject, int reason, const char *msg) {
    (void)file; (void)line; (void)func; (void)errorObject; (void)errorSubject; (void)reason; (void)msg;
}

/* libxml2's error handlers are per thread: set on the calling thread before each read. */
static inline void c_parley_xml_quiet_thread(void) {
    xmlSetGenericErrorFunc(NULL, c_parley_xml_silent_generic);
    xmlSetStructuredErrorFunc(NULL, c_parley_xml_silent_structured);
}

/* ---- nothing is ever fetched ---- */

/* Every external entity, DTD or URI libxml2 would load: refused (process-wide). */
static inline xmlParserInputPtr c_parley_xml_no_loader(const char *url, const char *id, xmlParserCtxtPtr ctxt) {
    (void)url; (void)id; (void)ctxt;
    return NULL;
}

/* Once per process, before any other call (SAMLIdentity's `static let`): 0 when ready.
   xmlsec's own I/O callbacks (file, http, ftp for Reference URIs) are removed, the
   external-entity loader refuses everything, and xmlsec's error printing is off. */
static inline int c_parley_xmlsec_init(void) {
    xmlInitParser();
    if (xmlSecInit() < 0) return 1;
    if (xmlSecCheckVersion() != 1) return 2;
    /* after xmlSecInit, which installs a loader of its own */
    xmlSetExternalEntityLoader(c_parley_xml_no_loader);
    xmlSecErrorsSetCallback(c_parley_xmlsec_silent);
    xmlSecIOCleanupCallbacks();
    if (xmlSecOpenSSLAppInit(NULL) < 0) return 3;
    if (xmlSecOpenSSLInit() < 0) return 4;
    return 0;
}

/* ---- the parse ---- */

/* SAX hook: a document type declaration stops the parse before its subset is read. */
static inline void c_parley_xml_refuse_dtd(void *ctx, const xmlChar *name, const xmlChar *externalID, const xmlChar *systemID) {
    (void)name; (void)externalID; (void)systemID;
    xmlParserCtxtPtr ctxt = (xmlParserCtxtPtr)ctx;
    ctxt->_private = (void *)ctxt;
    xmlStopParser(ctxt);
}

/* Parses `len` bytes into *out. 0: parsed (the caller frees *out with xmlFreeDoc);
   1: not well-formed XML; 2: it declares a document type (refused before its subset is
   read: no DTD, no entity, no external load). Options: no network, no entity
   substitution, no DTD loading or defaulting, no XInclude, CDATA merged into text,
   libxml2's default depth and size limits (no XML_PARSE_HUGE), errors not printed. */
static inline int c_parley_xml_parse(const char *bytes, int len, xmlDocPtr *out) {
    *out = NULL;
    c_parley_xml_quiet_thread();
    xmlParserCtxtPtr ctxt = xmlCreateMemoryParserCtxt(bytes, len);
    if (ctxt == NULL) return 1;
    xmlCtxtUseOptions(ctxt, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA);
    ctxt->_private = NULL;
    if (ctxt->sax != NULL) ctxt->sax->internalSubset = c_parley_xml_refuse_dtd;
    (void)xmlParseDocument(ctxt);
    int declared = ctxt->_private != NULL;
    int wellFormed = ctxt->wellFormed;
    xmlDocPtr doc = ctxt->myDoc;
    ctxt->myDoc = NULL;
    xmlFreeParserCtxt(ctxt);
    if (declared || !wellFormed || doc == NULL) {
        if (doc != NULL) xmlFreeDoc(doc);
        return declared ? 2 : 1;
    }
    if (doc->intSubset != NULL || doc->extSubset != NULL) { xmlFreeDoc(doc); return 2; }
    *out = doc;
    return 0;
}

/* An attribute's value, allocated by libxml2 (free with c_parley_xml_free); NULL when empty of nodes. */
static inline xmlChar *c_parley_xml_attribute_value(xmlAttrPtr attr) {
    return xmlNodeListGetString(attr->doc, attr->children, 1);
}
static inline void c_parley_xml_free(void *p) { if (p != NULL) xmlFree(p); }

/* ---- keys and signatures ---- */

/* The public key of one PEM certificate, or NULL. Freed with xmlSecKeyDestroy, or adopted by a context. */
static inline xmlSecKeyPtr c_parley_key_from_certificate_pem(const unsigned char *pem, size_t len) {
    /* xmlSecSize is unsigned int or size_t, as the library was built (XMLSEC_NO_SIZE_T). */
    if (pem == NULL || len == 0 || len > 1024 * 1024) return NULL;
    return xmlSecOpenSSLAppKeyLoadMemory(pem, (xmlSecSize)len, xmlSecKeyDataFormatCertPem, NULL, NULL, NULL);
}

/* A verification context that adopts `key` (destroyed with the context, or at once when
   this fails: NULL). The key is the only one used: without a keys manager xmlsec never
   reads the document's KeyInfo. Only same-document references ("#id") are followed, and
   only these algorithms are accepted: in a Reference enveloped-signature, exclusive c14n
   and SHA-256; in SignedInfo exclusive c14n, RSA-SHA256 and ECDSA-SHA256. */
static inline xmlSecDSigCtxPtr c_parley_dsig_context(xmlSecKeyPtr key) {
    xmlSecDSigCtxPtr ctx = xmlSecDSigCtxCreate(NULL);
    if (ctx == NULL) { xmlSecKeyDestroy(key); return NULL; }
    ctx->signKey = key;
    ctx->enabledReferenceUris = xmlSecTransformUriTypeSameDocument;
    if (xmlSecDSigCtxEnableReferenceTransform(ctx, xmlSecTransformEnvelopedId) < 0
        || xmlSecDSigCtxEnableReferenceTransform(ctx, xmlSecTransformExclC14NId) < 0
        || xmlSecDSigCtxEnableReferenceTransform(ctx, xmlSecOpenSSLTransformSha256Id) < 0
        || xmlSecDSigCtxEnableSignatureTransform(ctx, xmlSecTransformExclC14NId) < 0
        || xmlSecDSigCtxEnableSignatureTransform(ctx, xmlSecOpenSSLTransformRsaSha256Id) < 0
        || xmlSecDSigCtxEnableSignatureTransform(ctx, xmlSecOpenSSLTransformEcdsaSha256Id) < 0) {
        xmlSecDSigCtxDestroy(ctx);
        return NULL;
    }
    return ctx;
}

/* Verifies one <ds:Signature>. 0: it verifies, and what xmlsec processed is one Reference
   to `expectedURI`, digested with SHA-256, over exclusive c14n, signed with RSA-SHA256 or
   ECDSA-SHA256; 1: it does not verify with this context's key; 2: it verified something
   else than asked (another reference, more than one, another algorithm). */
static inline int c_parley_dsig_verify(xmlSecDSigCtxPtr ctx, xmlNodePtr signature, const char *expectedURI) {
    c_parley_xml_quiet_thread();
    if (xmlSecDSigCtxVerify(ctx, signature) < 0) return 1;
    if (ctx->status != xmlSecDSigStatusSucceeded) return 1;
    if (xmlSecPtrListGetSize(&ctx->signedInfoReferences) != 1) return 2;
    xmlSecDSigReferenceCtxPtr ref = (xmlSecDSigReferenceCtxPtr)xmlSecPtrListGetItem(&ctx->signedInfoReferences, 0);
    if (ref == NULL || ref->status != xmlSecDSigStatusSucceeded) return 2;
    if (ref->uri == NULL || !xmlStrEqual(ref->uri, (const xmlChar *)expectedURI)) return 2;
    if (ref->digestMethod == NULL || ref->digestMethod->id != xmlSecOpenSSLTransformSha256Id) return 2;
    if (ctx->c14nMethod == NULL || ctx->c14nMethod->id != xmlSecTransformExclC14NId) return 2;
    if (ctx->signMethod == NULL
        || (ctx->signMethod->id != xmlSecOpenSSLTransformRsaSha256Id && ctx->signMethod->id != xmlSecOpenSSLTransformEcdsaSha256Id)) return 2;
    return 0;
}
/* ---- signing (the assertions of saml2_bearer grants) ---- */

/* A private key (and, when the PEM holds one, its certificate), or NULL. Freed with
   xmlSecKeyDestroy, or adopted by a context. */
static inline xmlSecKeyPtr c_parley_key_from_private_pem(const unsigned char *pem, size_t len) {
    if (pem == NULL || len == 0 || len > 1024 * 1024) return NULL;
    return xmlSecOpenSSLAppKeyLoadMemory(pem, (xmlSecSize)len, xmlSecKeyDataFormatPem, NULL, NULL, NULL);
}

/* Signs the <ds:Signature> template `signature` (SignedInfo with its algorithms, one
   Reference, empty DigestValue and SignatureValue) with `key`, which is destroyed
   here whatever happens. 0: signed; 1: it could not be. */
static inline int c_parley_dsig_sign(xmlSecKeyPtr key, xmlNodePtr signature) {
    c_parley_xml_quiet_thread();
    xmlSecDSigCtxPtr ctx = xmlSecDSigCtxCreate(NULL);
    if (ctx == NULL) { xmlSecKeyDestroy(key); return 1; }
    ctx->signKey = key;
    ctx->enabledReferenceUris = xmlSecTransformUriTypeSameDocument;
    int failed = xmlSecDSigCtxSign(ctx, signature) < 0;
    xmlSecDSigCtxDestroy(ctx);
    return failed ? 1 : 0;
}

/* The document as UTF-8 text without the XML declaration's encoding change; *out is
   freed with c_parley_xml_free. 0: written; 1: not. */
static inline int c_parley_xml_dump(xmlDocPtr doc, xmlChar **out, int *len) {
    *out = NULL;
    *len = 0;
    xmlDocDumpMemoryEnc(doc, out, len, "UTF-8");
    return *out == NULL ? 1 : 0;
}
#endif
